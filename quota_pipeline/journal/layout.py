"""Where the journal keeps what, as pure functions: tick files, period files, which period a tick belongs to.

Per observed cluster (`<journal>/<config_name>/`):
  <YYYY-MM-DD>/<tick>.json                   one snapshot, the write-ahead form (day = the tick's UTC date)
  <YYYY-MM-DD>/<start>-<end>.parquet         one closed period, compacted (day = the period's start date)
  _cluster_id, _periods, _lock               the id last seen, the period lengths ever compacted, the lock

Periods are aligned to the Unix epoch (PT1H: whole UTC hours, P1D: UTC days). A tick belongs to the period
holding its start time (tick x check interval, computed exactly as the source does), so the store can find a
tick's period file from (tick, tick time) alone. A period file lists the tick files it replaced (`Sources`):
a tick file it lists is a leftover of an interrupted compaction, never read.
"""
from __future__ import annotations

import bisect
import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from quota_pipeline.core.model import EPOCH, UTC, micros

TICK_FILE = re.compile(r"^(\d+)\.json$")
DAY_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}$")
PERIOD_FILE = re.compile(r"^(\d{8}T\d{6}Z)-(\d{8}T\d{6}Z)\.parquet$")
STAMP = "%Y%m%dT%H%M%SZ"
PERIODS_FILE = "_periods"
LOCK_FILE = "_lock"
COMPACT_TMP_PREFIX = ".compact-"
WRITER_TMP_PREFIX = ".tmp-"


def tick_start(tick: int, interval_seconds: float) -> dt.datetime:
    """The tick's start time, with the source's own arithmetic (streaming.source.tick_time)."""
    return dt.datetime.fromtimestamp(tick * interval_seconds, UTC)


def day_of(t: dt.datetime) -> str:
    return f"{t.astimezone(UTC):%Y-%m-%d}"


def tick_file(tick: int, tick_time: dt.datetime) -> str:
    """A tick file's path relative to the cluster's directory."""
    return f"{day_of(tick_time)}/{tick}.json"


@dataclass(frozen=True, order=True)
class Period:
    """[start, end) of one compaction unit."""

    start: dt.datetime
    end: dt.datetime

    @classmethod
    def containing(cls, t: dt.datetime, length: dt.timedelta) -> Period:
        n = micros(t - EPOCH) // micros(length)
        start = EPOCH + n * length
        return cls(start, start + length)

    @property
    def file(self) -> str:
        """The period file's path relative to the cluster's directory."""
        return f"{day_of(self.start)}/{self.start:{STAMP}}-{self.end:{STAMP}}.parquet"

    @classmethod
    def from_file_name(cls, name: str) -> Period | None:
        m = PERIOD_FILE.match(name)
        if not m:
            return None
        start, end = (dt.datetime.strptime(s, STAMP).replace(tzinfo=UTC) for s in m.groups())
        return cls(start, end) if end > start else None

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%dT%H:%M:%SZ}/{self.end:%Y-%m-%dT%H:%M:%SZ}"


def tick_period(day: str, tick: int, interval_seconds: float, length: dt.timedelta) -> Period | None:
    """The period of tick file `<day>/<tick>.json`, or None when the current check interval does not put
    that tick on that day (the interval changed since): then the snapshot's own observed_at decides."""
    try:
        start = tick_start(tick, interval_seconds)
    except (ValueError, OverflowError, OSError):  # a file name (outside text) beyond the calendar: not this day's
        return None
    return Period.containing(start, length) if day_of(start) == day else None


def grace(interval: dt.timedelta) -> dt.timedelta:
    """How long after its end a period stays open: a tick is journaled within one interval of its start (the
    poll times out before the next is due), so three intervals and at least a minute leave a wide margin.
    A later write (a re-run after a long outage) is not lost: the next pass merges it into the period file."""
    return max(dt.timedelta(minutes=1), 3 * interval)


def is_closed(period: Period, now: dt.datetime, interval: dt.timedelta) -> bool:
    return period.end + grace(interval) <= now


def is_expired(period: Period, now: dt.datetime, retention: dt.timedelta) -> bool:
    """Past retention (the whole period ended longer ago than it); PT0S keeps everything."""
    return retention > dt.timedelta(0) and period.end <= now - retention


class Sources:
    """The tick files a period file replaced, stored as tick ranges per day (a few bytes per hour of ticks)."""

    def __init__(self, ranges: dict[str, list[tuple[int, int]]] | None = None) -> None:
        self.ranges = {day: _coalesce(r) for day, r in (ranges or {}).items() if r}
        self._starts = {day: [a for a, _ in r] for day, r in self.ranges.items()}

    @classmethod
    def of(cls, files: Iterable[str]) -> Sources:
        by_day: dict[str, list[tuple[int, int]]] = {}
        for rel in files:
            day, name = rel.split("/")
            tick = int(TICK_FILE.match(name).group(1))  # type: ignore[union-attr]
            by_day.setdefault(day, []).append((tick, tick))
        return cls(by_day)

    @classmethod
    def merge(cls, many: Iterable[Sources]) -> Sources:
        by_day: dict[str, list[tuple[int, int]]] = {}
        for s in many:
            for day, r in s.ranges.items():
                by_day.setdefault(day, []).extend(r)
        return cls(by_day)

    def __contains__(self, rel: str) -> bool:
        day, _, name = rel.partition("/")
        m = TICK_FILE.match(name)
        if not m or day not in self.ranges:
            return False
        tick = int(m.group(1))
        i = bisect.bisect_right(self._starts[day], tick) - 1
        return i >= 0 and self.ranges[day][i][1] >= tick

    def __len__(self) -> int:
        return sum(b - a + 1 for r in self.ranges.values() for a, b in r)

    def __iter__(self) -> Iterator[str]:
        for day, r in sorted(self.ranges.items()):
            for a, b in r:
                for tick in range(a, b + 1):
                    yield f"{day}/{tick}.json"

    def to_json(self) -> str:
        return json.dumps({day: [list(x) for x in r] for day, r in sorted(self.ranges.items())},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Sources:
        """The footer's text, or ValueError saying it is malformed (a Parquet file from elsewhere may hold anything)."""
        try:
            raw = json.loads(text)
            ranges = {day: [(int(a), int(b)) for a, b in r] for day, r in raw.items()}
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise ValueError(f"not a map of day to tick ranges: {exc}") from None
        if not all(isinstance(day, str) and DAY_DIR.match(day) for day in ranges):
            raise ValueError("not a map of day (YYYY-MM-DD) to tick ranges")
        return cls(ranges)


def _coalesce(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint ranges: touching or overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
