"""Compaction and retention of one cluster's journal: a pure plan, then crash-safe steps.

Why it is safe at every point (kill -9 included):
- A period file is written to a dot-named temporary file (readers skip dot names), fsynced, and renamed into
  place; the directory is fsynced; only then are the tick files it replaced deleted. Its footer lists those
  tick files (layout.Sources), and every reader (replay, Journal.read, the next pass) skips a listed tick
  file: between the rename and the last deletion the period is visible once, from the period file.
- Membership follows the tick (layout.tick_period), not the clock: a tick journaled late into a closed period
  (a micro-batch re-run after a long outage) is a tick file the period file does not list. Readers read it,
  the next pass merges it into the period file. Nothing is compacted from a list taken before the write.
- A re-run of a tick after compaction still finds its snapshot: Journal.read looks in the period file when
  the tick file is gone, and Journal.write gives way to a snapshot of the tick already compacted. So
  compaction may touch any closed period, however recently a restarted batch could re-read it; a period
  closes `layout.grace` after its end, so that compaction seldom races the tick's first write.
- One compaction per cluster at a time (flock on `_lock`, released by the kernel when a process dies): the
  streaming job's driver and `quota-pipeline journal compact` may both run.
- Retention deletes leftovers first (invisible), then the period file, then the period's tick files: a pass
  killed half-way leaves at worst a subset of an expired period, which the next pass deletes.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from quota_pipeline.journal import layout
from quota_pipeline.journal.layout import Period
from quota_pipeline.journal.listing import Listing, PeriodFile, TickFile
from quota_pipeline.journal.private import write_private

Step = Callable[[str], None]  # called after each step by name; tests inject failures (and kill -9) here
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

def fsync_dir(path: Path) -> None:
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_all(cluster_dir: Path, rels, step: Step, name: str) -> int:
    removed = 0
    for i, rel in enumerate(rels):
        try:
            (cluster_dir / rel).unlink()
            removed += 1
        except FileNotFoundError:
            pass  # a concurrent writer's own clean-up, or a previous pass's
        if i == 0:
            step(f"{name}-first")
    step(name)
    return removed


def prune(cluster_dir: Path, action: Prune, step: Step = no_step) -> None:
    """Leftovers (invisible) first, then the period file, then the period's visible tick files."""
    _unlink_all(cluster_dir, [t.rel for t in action.leftovers], step, "prune-leftovers")
    _unlink_all(cluster_dir, [p.rel for p in action.period_files], step, "prune-period-files")
    _unlink_all(cluster_dir, [t.rel for t in action.ticks], step, "prune-ticks")
    for day in {Path(f.rel).parent for f in (*action.leftovers, *action.period_files, *action.ticks)}:
        try:
            (cluster_dir / day).rmdir()
        except OSError:
            pass  # not empty: other periods of that day remain


def remove_stale(cluster_dir: Path, rels: tuple[str, ...]) -> None:
    for rel in rels:
        (cluster_dir / rel).unlink(missing_ok=True)


def record_length(cluster_dir: Path, length: dt.timedelta) -> None:
    """Adds `length` to _periods (the store looks a compacted tick up under every length used) before the
    first period file of that length exists."""
    import isodate

    path = cluster_dir / layout.PERIODS_FILE
    known = path.read_text().split() if path.exists() else []
    text = isodate.duration_isoformat(length)
    if text in known:
        return
    write_private(path, ("\n".join([*known, text]) + "\n").encode())
    fsync_dir(cluster_dir)
