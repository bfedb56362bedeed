"""Compaction and retention of one cluster's journal, as a pure plan (journal/maintenance.py carries it out).

Why a pass is safe at every point (kill -9 included), on any storage (journal/storage.py):
- A period file is built aside (a dot-named file beside its name locally, a staging directory for an object
  store) and published whole by `Storage.put_file` (fsync, rename, fsync of the directory; or one PUT), only
  then are the tick files it replaced deleted. Its footer lists those tick files (layout.Sources), and every
  reader (replay, Journal.read, the next pass) skips a listed tick file: between the publication and the last
  deletion the period is visible once, from the period file.
- Membership follows the tick (layout.tick_period), not the clock: a tick journaled late into a closed period
  (a micro-batch re-run after a long outage) is a tick file the period file does not list. Readers read it,
  the next pass merges it into the period file. Nothing is compacted from a list taken before the write.
- A re-run of a tick after compaction still finds its snapshot: Journal.read looks in the period file when
  the tick file is gone, and Journal.write gives way to a snapshot of the tick already compacted. So
  compaction may touch any closed period, however recently a restarted batch could re-read it; a period
  closes `layout.grace` after its end, so that compaction seldom races the tick's first write.
- One compaction per cluster at a time: the streaming job's driver and `quota-pipeline journal compact` may both
  run. Locally an flock on `_lock` (released by the kernel when a process dies); on an object store the period
  file's PUT is conditional (If-None-Match when new, If-Match on the ETag listed when late ticks extend it), so of
  two racing passes one writes the period and the other deletes nothing.
- Retention deletes leftovers first (invisible), then the period file, then the period's tick files: a pass
  killed half-way leaves at worst a subset of an expired period, which the next pass deletes.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from quota_pipeline.journal import layout
from quota_pipeline.journal.layout import Period
from quota_pipeline.journal.listing import Listing, PeriodFile, TickFile

WRITER_TMP_STALE_S = 3600     # a writer's temporary file lives milliseconds; an hour-old one is abandoned


def no_step(_name: str) -> None:
    pass


@dataclass(frozen=True)
class Compact:
    """Write (or extend) the period file of one closed period, then delete the tick files it replaced."""

    period: Period
    existing: PeriodFile | None       # the period file to extend with late ticks
    new: tuple[TickFile, ...]         # tick files to add
    leftovers: tuple[TickFile, ...]   # tick files some period file already holds

    @property
    def target(self) -> str:
        return self.period.file


@dataclass(frozen=True)
class Prune:
    """Delete one period past retention, every form of it."""

    period: Period
    leftovers: tuple[TickFile, ...]
    period_files: tuple[PeriodFile, ...]
    ticks: tuple[TickFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in (*self.leftovers, *self.period_files, *self.ticks))

    @property
    def files(self) -> int:
        return len(self.leftovers) + len(self.period_files) + len(self.ticks)


@dataclass(frozen=True)
class Plan:
    prune: tuple[Prune, ...]
    compact: tuple[Compact, ...]
    stale: tuple[str, ...]   # abandoned temporary files
    problems: tuple[str, ...]


def plan(listing: Listing, now: dt.datetime, interval: dt.timedelta, length: dt.timedelta,
         retention: dt.timedelta, wall_seconds: float | None = None) -> Plan:
    """What a pass does at `now`: expired periods go, closed periods are compacted (oldest first)."""
    ticks_by: dict[Period, list[TickFile]] = {}
    for t in listing.ticks:
        ticks_by.setdefault(t.period, []).append(t)
    files_by: dict[Period, list[PeriodFile]] = {}
    for p in listing.periods:
        files_by.setdefault(p.period, []).append(p)
    prune, compact, problems = [], [], []
    for period in sorted(set(ticks_by) | set(files_by)):
        ticks, files = ticks_by.get(period, []), files_by.get(period, [])
        left = tuple(t for t in ticks if listing.is_leftover(t))
        new = tuple(t for t in ticks if not listing.is_leftover(t))
        if layout.is_expired(period, now, retention):
            prune.append(Prune(period, left, tuple(files), new))
        elif layout.is_closed(period, now, interval) and (new or left):
            existing = next((f for f in files if f.rel == period.file), None)
            if existing is not None and existing.footer is None:
                problems.append(f"{existing.rel}: {existing.problem}; its period is not compacted further")
                continue
            compact.append(Compact(period, existing, new, left))
    stale = tuple(o.rel for o in listing.others if Path(o.rel).name.startswith(layout.COMPACT_TMP_PREFIX)
                  or (Path(o.rel).name.startswith(layout.WRITER_TMP_PREFIX) and wall_seconds is not None
                      and wall_seconds - o.mtime > WRITER_TMP_STALE_S))
    return Plan(tuple(prune), tuple(compact), stale, tuple(problems))


def plan_for(listing: Listing, now: dt.datetime, interval: dt.timedelta, length: dt.timedelta,
             retention: dt.timedelta, wall_seconds: float | None, prune: bool, compact: bool) -> Plan:
    """The plan of a pass that prunes, compacts or both; compacting alone takes closed periods whatever their age."""
    made = plan(listing, now, interval, length, retention if prune else dt.timedelta(0), wall_seconds)
    return Plan(made.prune if prune else (), made.compact if compact else (), made.stale, made.problems)
