"""The overview kept up to date a cluster at a time: each cluster's row is built once and kept until the cluster
changes (a record, an unreadable record, leaving the window) or until its state changes with time (it goes stale,
its decision expires), when that row alone is rebuilt; an update lists only the rows that changed since a version."""
from __future__ import annotations

import datetime as dt
import heapq
import json
import threading
from dataclasses import dataclass
from typing import Any

from quota_pipeline.core.clock import Clock
from quota_pipeline.dashboard import view
from quota_pipeline.dashboard.changes import SLACK, ChangeLog
from quota_pipeline.dashboard.history import ClusterRecord, History

COUNTED = ("stopped", "throttled", "stale", "fallback")


@dataclass(frozen=True)
class Row:
    """One cluster's overview row: the copy it was built from, its JSON, and when time alone next changes it."""

    rec: ClusterRecord
    body: str
    risk: tuple[Any, ...]
    counted: tuple[bool, bool, bool, bool]  # stopped, throttled, stale, fallback
    until: dt.datetime | None


def _counted(s: view.ClusterSummary) -> tuple[bool, bool, bool, bool]:
    return s.state == "STOPPED", s.state == "THROTTLED", s.stale, s.basis == "fallback"


class Board:
    """`refresh()` brings the rows up to date (cheap when little changed) and returns the board's version;
    `rows()` every row riskiest first, `changes(since)` the rows changed and the keys removed after a version."""

    def __init__(self, history: History, settings: view.ViewSettings, clock: Clock) -> None:
        self.history, self.settings, self.clock = history, settings, clock
        self._rows: dict[str, Row] = {}
        self._seen: int | None = None  # the history's change number read so far
        self._log = ChangeLog()  # rows changed or removed, by board version
        self._timers: list[tuple[dt.datetime, str]] = []  # (until, key), stale entries skipped when popped
        self._counts = dict.fromkeys(COUNTED, 0)
        self._ordered: tuple[int, list[Row]] | None = None
        self._lock = threading.Lock()

    @property
    def version(self) -> int:
        return self._log.version

    def refresh(self) -> int:
        with self._lock:
            now = self.clock.now()
            changes = self.history.changes(self._seen)
            self._seen = changes.version
            if changes.full:
                present = {r.key for r in changes.records}
                for key in [k for k in self._rows if k not in present]:
                    self._drop(key)
            for rec in changes.records:
                self._put(rec, now)
            for key in changes.removed:
                self._drop(key)
            while self._timers and self._timers[0][0] < now:
                at, key = heapq.heappop(self._timers)
                row = self._rows.get(key)
                if row is not None and row.until == at:
                    self._put(row.rec, now)
            if len(self._timers) > 2 * len(self._rows) + SLACK:  # a cluster publishing faster than it goes stale
                self._timers = [(r.until, k) for k, r in self._rows.items() if r.until is not None]
                heapq.heapify(self._timers)
            self._log.trim(len(self._rows))
            return self._log.version

    def _put(self, rec: ClusterRecord, now: dt.datetime) -> None:
        s = view.summarize(rec, now, self.settings)
        body = json.dumps(view.row_json(s), separators=(",", ":"))
        row = Row(rec, body, s.risk(), _counted(s), view.changes_after(s, self.settings))
        old = self._rows.get(rec.key)
        self._count(old, -1)
        self._count(row, +1)
        self._rows[rec.key] = row
        if row.until is not None:
            heapq.heappush(self._timers, (row.until, rec.key))
        if old is None or old.body != body:
            self._log.touch(rec.key)

    def _drop(self, key: str) -> None:
        row = self._rows.pop(key, None)
        if row is not None:
            self._count(row, -1)
            self._log.touch(key)

    def _count(self, row: Row | None, sign: int) -> None:
        if row is not None:
            for name, yes in zip(COUNTED, row.counted):
                self._counts[name] += sign * yes

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"clusters": len(self._rows), **self._counts}

    def rows(self) -> tuple[int, list[str]]:
        """The version and every row's JSON, riskiest first (sorted once per version)."""
        with self._lock:
            if self._ordered is None or self._ordered[0] != self._log.version:
                self._ordered = (self._log.version, sorted(self._rows.values(), key=lambda r: r.risk))
            return self._ordered[0], [r.body for r in self._ordered[1]]

    def changes(self, since: int) -> tuple[int, list[str], list[str]] | None:
        """The version, the JSON of the rows changed after `since` and the keys removed; None: too old, take
        `rows()`. The page places changed rows by their `risk`."""
        with self._lock:
            keys = self._log.since(since)
            if keys is None:
                return None
            return (self._log.version, [self._rows[k].body for k in keys if k in self._rows],
                    [k for k in keys if k not in self._rows])
