"""What one cluster's journal directory holds (tick files, period files, the rest) and what that adds up to."""
from __future__ import annotations

import datetime as dt
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from quota_pipeline.core.model import RecordError, parse_time
from quota_pipeline.journal import layout
from quota_pipeline.journal.layout import Period, Sources
from quota_pipeline.journal.period_file import Footer, read_footer

_OBSERVED_AT = re.compile(rb'"observed_at"\s*:\s*"([^"\\]{1,64})"')
PEEK_BYTES = 512  # the store writes cluster_id, then observed_at: both within the first bytes


@dataclass(frozen=True)
class TickFile:
    rel: str       # <day>/<tick>.json, relative to the cluster's directory
    tick: int
    size: int
    period: Period


@dataclass(frozen=True)
class PeriodFile:
    rel: str
    period: Period
    size: int
    footer: Footer | None   # None: unreadable, see problem
    problem: str | None = None


@dataclass(frozen=True)
class OtherFile:
    rel: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Listing:
    ticks: tuple[TickFile, ...]
    periods: tuple[PeriodFile, ...]
    others: tuple[OtherFile, ...]
    compacted: Sources = field(default_factory=Sources)  # every tick file some period file replaced

    def is_leftover(self, tick: TickFile) -> bool:
        return tick.rel in self.compacted

    @property
    def bytes(self) -> int:
        return sum(f.size for f in (*self.ticks, *self.periods, *self.others))

    @property
    def files(self) -> int:
        return len(self.ticks) + len(self.periods) + len(self.others)


def observed_at_of(path: Path) -> dt.datetime | None:
    """A tick file's observed_at, read from its first bytes (the whole file only when it is not there)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(PEEK_BYTES)
            m = _OBSERVED_AT.search(head)
            if m is None:
                head += fh.read()
                value = json.loads(head).get("observed_at")
            else:
                value = m.group(1).decode()
        return parse_time(value)
    except (OSError, ValueError, AttributeError, RecordError, RecursionError):  # nesting deeper than the stack
        return None


class FooterCache:
    """Footers of period files by (path, size, mtime): a pass reads each new footer once."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], Footer] = {}

    def get(self, path: Path, st: os.stat_result) -> Footer:
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in self._known:
            self._known[key] = read_footer(path)
        return self._known[key]


def _tick_period(cluster_dir: Path, day: str, tick: int, interval: dt.timedelta,
                 length: dt.timedelta) -> Period:
    known = layout.tick_period(day, tick, interval.total_seconds(), length)
    if known is not None:
        return known
    # The check interval changed since this tick was journaled: its own observed_at decides (else its day).
    observed = observed_at_of(cluster_dir / day / f"{tick}.json")
    return Period.containing(observed or dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=layout.UTC), length)


def scan(cluster_dir: Path, interval: dt.timedelta, length: dt.timedelta,
         footers: FooterCache | None = None) -> Listing:
    """Every file under the cluster's directory; period files' footers are read (unreadable ones noted)."""
    footers = footers or FooterCache()
    ticks, periods, others = [], [], []
    compacted: list[Sources] = []
    if not cluster_dir.is_dir():
        return Listing((), (), ())
    # Symlinks are never followed nor listed: nothing is read, compacted or deleted outside the cluster's directory.
    for entry in sorted(os.scandir(cluster_dir), key=lambda e: e.name):
        if entry.is_symlink():
            continue
        if not (entry.is_dir(follow_symlinks=False) and layout.DAY_DIR.match(entry.name)):
            st = _stat(entry)
            if st is not None and entry.is_file(follow_symlinks=False):
                others.append(OtherFile(entry.name, st.st_size, st.st_mtime))
            continue
        for f in _entries(entry.path):
            st = _stat(f) if f.is_file(follow_symlinks=False) else None
            if st is None:
                continue
            rel = f"{entry.name}/{f.name}"
            tick, period = layout.TICK_FILE.match(f.name), Period.from_file_name(f.name)
            if tick:
                n = int(tick.group(1))
                ticks.append(TickFile(rel, n, st.st_size, _tick_period(cluster_dir, entry.name, n, interval, length)))
            elif period:
                try:
                    footer = footers.get(Path(f.path), st)
                    compacted.append(footer.sources)
                    periods.append(PeriodFile(rel, period, st.st_size, footer))
                except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid, a ValueError
                    periods.append(PeriodFile(rel, period, st.st_size, None, f"unreadable: {exc}"))
            else:
                others.append(OtherFile(rel, st.st_size, st.st_mtime))
    ticks.sort(key=lambda t: (t.period, t.rel.split("/")[0], t.tick))
    periods.sort(key=lambda p: p.period)
    return Listing(tuple(ticks), tuple(periods), tuple(others), Sources.merge(compacted))


def _entries(path: str) -> list[os.DirEntry]:
    try:
        return list(os.scandir(path))
    except FileNotFoundError:  # a day directory emptied and removed by retention meanwhile
        return []


def _stat(entry: os.DirEntry) -> os.stat_result | None:
    """The entry's stat, or None when it went away since the listing (a writer giving way, a pass deleting)."""
    try:
        return entry.stat()
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Usage:
    """What `journal stats` shows and the job's metrics export, for one cluster."""

    bytes: int
    files: int
    periods_compacted: int
    periods_open: int
    tick_files: int
    oldest: dt.datetime | None
    newest: dt.datetime | None
    unreadable: tuple[str, ...]

    def to_json(self) -> dict:
        def fmt(t: dt.datetime | None) -> str | None:
            return None if t is None else t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"

        return {"bytes": self.bytes, "files": self.files, "periods_compacted": self.periods_compacted,
                "periods_open": self.periods_open, "tick_files": self.tick_files,
                "oldest": fmt(self.oldest), "newest": fmt(self.newest), "unreadable": list(self.unreadable)}


def usage(cluster_dir: Path, listing: Listing,
          observed: Callable[[str], dt.datetime | None] | None = None) -> Usage:
    """`observed` reads a tick file's observed_at by its relative path (an object store's); a file's by default."""
    observed = observed or (lambda rel: observed_at_of(cluster_dir / rel))
    visible = [t for t in listing.ticks if not listing.is_leftover(t)]
    times = [parse_time(v) for p in listing.periods if p.footer
             for v in (p.footer.first_observed_at, p.footer.last_observed_at) if v]
    for t in (visible[:1] + visible[-1:]):   # sorted by period, day and tick: the ends hold the extremes
        seen = observed(t.rel)
        if seen is not None:
            times.append(seen)
    return Usage(listing.bytes, listing.files, len(listing.periods), len({t.period for t in visible}),
                 len(listing.ticks), min(times, default=None), max(times, default=None),
                 tuple(p.rel for p in listing.periods if p.footer is None))
