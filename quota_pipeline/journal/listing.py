"""What one cluster's journal holds on any storage (tick files, period files, the rest) and what that adds up to."""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field

from quota_pipeline.core.model import RecordError, parse_time
from quota_pipeline.journal import layout
from quota_pipeline.journal.layout import Period, Sources
from quota_pipeline.journal.period_file import Footer, read_footer
from quota_pipeline.journal.storage import StoredFile, Storage

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


def observed_at(storage: Storage, rel: str) -> dt.datetime | None:
    """A tick file's observed_at, read from its first bytes (the whole file only when it is not there)."""
    try:
        head = storage.read(rel, PEEK_BYTES)
        m = None if head is None else _OBSERVED_AT.search(head)
        if m is None:
            data = storage.read(rel)
            return None if data is None else parse_time(json.loads(data).get("observed_at"))
        return parse_time(m.group(1).decode())
    except (OSError, ValueError, AttributeError, RecordError, RecursionError):  # nesting deeper than the stack
        return None


class FooterCache:
    """Footers of period files by (name, version): a pass reads each new footer once."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], Footer] = {}

    def get(self, storage: Storage, entry: StoredFile) -> Footer:
        key = (entry.rel, entry.version)
        if key not in self._known:
            if len(self._known) > 100_000:
                self._known.clear()
            with storage.open(entry.rel) as fh:
                self._known[key] = read_footer(fh)
        return self._known[key]


def _tick_period(storage: Storage, name: str, day: str, tick: int, interval: dt.timedelta,
                 length: dt.timedelta) -> Period:
    known = layout.tick_period(day, tick, interval.total_seconds(), length)
    if known is not None:
        return known
    # The check interval changed since this tick was journaled: its own observed_at decides (else its day).
    observed = observed_at(storage, f"{name}/{day}/{tick}.json")
    return Period.containing(observed or dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=layout.UTC), length)


def scan(storage: Storage, name: str, interval: dt.timedelta, length: dt.timedelta,
         footers: FooterCache | None = None) -> tuple[Listing, dict[str, str]]:
    """Every file of the cluster `name` (rel from its directory), period files' footers read (unreadable ones
    noted), and each file's version by that rel."""
    footers = footers or FooterCache()
    ticks, periods, others, compacted, versions = [], [], [], [], {}
    for entry in storage.list(name):
        rel = entry.rel[len(name) + 1:]
        day, _, file = rel.partition("/")
        versions[rel] = entry.version
        tick, period = layout.TICK_FILE.match(file), Period.from_file_name(file)
        if not layout.DAY_DIR.match(day) or "/" in file or not (tick or period):
            others.append(OtherFile(rel, entry.size, entry.mtime))
        elif tick:
            n = int(tick.group(1))
            ticks.append(TickFile(rel, n, entry.size, _tick_period(storage, name, day, n, interval, length)))
        else:
            try:
                footer = footers.get(storage, entry)
                compacted.append(footer.sources)
                periods.append(PeriodFile(rel, period, entry.size, footer))
            except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid, a ValueError
                periods.append(PeriodFile(rel, period, entry.size, None, f"unreadable: {exc}"))
    ticks.sort(key=lambda t: (t.period, t.rel.split("/")[0], t.tick))
    periods.sort(key=lambda p: p.period)
    return Listing(tuple(ticks), tuple(periods), tuple(others), Sources.merge(compacted)), versions


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


def usage(storage: Storage, name: str, listing: Listing) -> Usage:
    """What the cluster `name`'s files add up to (the listing's, which `scan` made)."""
    visible = [t for t in listing.ticks if not listing.is_leftover(t)]
    times = [parse_time(v) for p in listing.periods if p.footer
             for v in (p.footer.first_observed_at, p.footer.last_observed_at) if v]
    for t in (visible[:1] + visible[-1:]):   # sorted by period, day and tick: the ends hold the extremes
        seen = observed_at(storage, f"{name}/{t.rel}")
        if seen is not None:
            times.append(seen)
    return Usage(listing.bytes, listing.files, len(listing.periods), len({t.period for t in visible}),
                 len(listing.ticks), min(times, default=None), max(times, default=None),
                 tuple(p.rel for p in listing.periods if p.footer is None))
