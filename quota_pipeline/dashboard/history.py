"""Bounded history of the decision topic: every readable record per cluster within a window, the latest in full;
records not signed with a configured key, or dated ahead of the clock (beyond the skew allowance), are refused and
counted, as brokers refuse them."""
from __future__ import annotations

import bisect
import datetime as dt
import math
import threading
from array import array
from dataclasses import dataclass, field
from typing import Any

from quota_pipeline.reader.admission import refusal, replay_refusal, signature_refusal
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.properties import DEFAULT_MAX_CLOCK_SKEW
from quota_pipeline.core.record import ThrottleDecision
from quota_pipeline.core.signing import SigningKey, signature_of
from quota_pipeline.dashboard.changes import ChangeLog
from quota_pipeline.dashboard.records import DecisionView, read_decision, view_of

DEFAULT_WINDOW = dt.timedelta(hours=6)
DEFAULT_MAX_POINTS = 3600


@dataclass(frozen=True)
class Points:
    """A copy of one cluster's timeline: observed_at in epoch seconds, factor, minimum available ratio (None: none)."""

    t: list[float]
    factor: list[float]
    min_ratio: list[float | None]

    def __len__(self) -> int:
        return len(self.t)


class Timeline:
    """One cluster's decisions in observed_at order, as three float arrays (24 bytes a point; NaN: no ratio)."""

    def __init__(self) -> None:
        self.t, self.factor, self.ratio = array("d"), array("d"), array("d")

    def __len__(self) -> int:
        return len(self.t)

    def add(self, t: float, factor: float, ratio: float | None) -> bool:
        """Insert in time order (the same observed_at replaces: a re-run micro-batch); True when appended."""
        r = math.nan if ratio is None else ratio
        if not self.t or t > self.t[-1]:
            self.t.append(t)
            self.factor.append(factor)
            self.ratio.append(r)
            return True
        i = bisect.bisect_left(self.t, t)
        if self.t[i] == t:
            self.factor[i], self.ratio[i] = factor, r
        else:  # a late record
            self.t.insert(i, t)
            self.factor.insert(i, factor)
            self.ratio.insert(i, r)
        return False

    def trim(self, oldest: float, max_points: int) -> None:
        n = max(bisect.bisect_left(self.t, oldest), len(self.t) - max_points)
        if n > 0:
            del self.t[:n], self.factor[:n], self.ratio[:n]

    def run_start(self) -> float | None:
        """Where the trailing run of factor < 1 begins; None when the last factor is 1."""
        start = None
        for i in range(len(self.t) - 1, -1, -1):
            if self.factor[i] >= 1.0:
                break
            start = self.t[i]
        return start

    def copy(self) -> Points:
        return Points(self.t.tolist(), self.factor.tolist(), [None if math.isnan(r) else r for r in self.ratio])


ERROR_CHARS = 300  # the most of a reading error the page and `tail` show


def cluster_named(key: bytes | None) -> str | None:
    """The cluster whose row an unreadable record is shown on: the one its key names exactly. A key that is not
    UTF-8 names none (the pipeline writes cluster names): decoded with replacement characters it could equal another
    cluster's key, and a record nobody can read must not put its text on a cluster it does not name."""
    try:
        return None if key is None else key.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class Unreadable:
    """A record that could not be read: where it is on the topic and why."""

    key: str | None
    where: str
    error: str
    at: dt.datetime


@dataclass(frozen=True)
class Refused:
    """A record refused as brokers refuse it (not signed with a configured key, or observed_at or decided_at too far
    ahead): where it is and why."""

    key: str | None
    where: str
    reason: str
    at: dt.datetime


@dataclass
class ClusterHistory:
    """One record key's timeline and latest record; `run_start` is where its current run of factor < 1 began."""

    key: str
    timeline: Timeline = field(default_factory=Timeline)
    latest: ThrottleDecision | None = None
    latest_value: bytes = b""
    view: DecisionView | None = None  # of `latest`, built when first asked for
    received_at: dt.datetime | None = None
    unreadable: int = 0
    last_error: Unreadable | None = None
    run_start: float | None = None
    first_t: float | None = None  # the oldest observed_at ever seen: a run starting there may have started earlier

    def add(self, d: ThrottleDecision, value: bytes, window_seconds: float, max_points: int) -> bool:
        """Take a readable record; False for one older than the window. The latest observed_at wins."""
        t, line = d.observed_at.timestamp(), self.timeline
        newest = max(t, line.t[-1]) if len(line) else t
        if t < newest - window_seconds:
            return False
        self.first_t = t if self.first_t is None else min(self.first_t, t)
        continuing = len(line) > 0 and line.factor[-1] < 1.0 and self.run_start is not None
        ratio = None if d.min_available_ratio is None else float(d.min_available_ratio)
        if line.add(t, d.throttle_factor, ratio):
            self.run_start = None if d.throttle_factor >= 1.0 else (self.run_start if continuing else t)
        else:
            self.run_start = line.run_start()
        line.trim(newest - window_seconds, max_points)
        if self.latest is None or d.observed_at >= self.latest.observed_at:
            self.latest, self.latest_value, self.view = d, value, None
        return True

    def latest_view(self) -> DecisionView | None:
        if self.view is None and self.latest is not None:
            self.view = view_of(self.latest, self.latest_value)
        return self.view


@dataclass(frozen=True)
class ClusterRecord:
    """An immutable copy of one cluster's history for the pure view model."""

    key: str
    latest: DecisionView | None
    received_at: dt.datetime | None
    unreadable: int
    last_error: Unreadable | None
    run_start: float | None
    first_t: float | None
    points: Points = Points([], [], [])


@dataclass(frozen=True)
class Changes:
    """The clusters changed after a change number (all of them when `full`) and the keys that left."""

    version: int
    full: bool
    records: list[ClusterRecord]
    removed: list[str]


@dataclass
class History:
    """Every readable record of every cluster within `window` (at most `max_points` each); thread-safe. A cluster
    whose latest record is older than the window (silent that long) is dropped, so the page lists only clusters
    heard from within it and memory follows the live fleet, not every key the topic ever held."""

    window: dt.timedelta = DEFAULT_WINDOW
    max_points: int = DEFAULT_MAX_POINTS
    clock: Clock = SYSTEM
    max_clock_skew: dt.timedelta = DEFAULT_MAX_CLOCK_SKEW  # quota.pipeline.reader.max.clock.skew
    signing_keys: tuple[SigningKey, ...] = ()  # quota.pipeline.signing.keys: none, no signature required
    version: int = 0  # changes whenever what the page shows changes
    unreadable_total: int = 0
    last_unreadable: Unreadable | None = None
    refused_total: int = 0
    last_refused: Refused | None = None
    _clusters: dict[str, ClusterHistory] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _expired_at: dt.datetime | None = None
    _log: ChangeLog = field(default_factory=ChangeLog)  # which clusters changed (or left), for incremental views

    def apply(self, key: bytes | None, value: bytes | None, where: str = "",
              headers: list[tuple[str, Any]] | None = None) -> bool:
        """Take one topic record; False when it could not be read, was refused or is outside the window. Never
        raises. A refused record (not signed with a configured key, or dated further ahead of the clock than the skew
        allowance) enters no timeline: brokers refuse it too, and shown as the latest it would hide every genuine
        decision after it. The signature is checked on the record's bytes before anything is read from them: with
        signing keys, an unsigned record creates or changes no row, whatever it holds, and only counts as refused."""
        name = key.decode("utf-8", "replace") if key is not None else None
        if value is None:
            return False  # a tombstone is read as absence, as brokers read it: the decision in force stays
        why = signature_refusal(self.signing_keys, key, value, signature_of(headers))
        if why is not None:
            with self._lock:
                self._refuse(name, where, why)
            return False
        try:
            decision = read_decision(value)
        except (ValueError, RecursionError) as exc:  # JSON, rules, unicode; deep nesting
            self._unreadable(name, cluster_named(key), where, str(exc))
            return False
        now = self.clock.now()
        why = refusal(decision, now, self.max_clock_skew)
        if why is not None:
            with self._lock:
                self._refuse(name, where, why)
            return False
        with self._lock:
            if decision.observed_at < now - self.window:
                return False  # a cluster silent for longer than the window is not on the page
            known = self._clusters.get(name or decision.cluster_id)
            why = replay_refusal(decision, None if known is None or known.latest is None else known.latest.observed_at)
            if why is not None:  # read after a newer record of its cluster: written again, as brokers refuse it
                self._refuse(name, where, why)
                return False
            cluster = self._cluster(name or decision.cluster_id)
            if not cluster.add(decision, value, self.window.total_seconds(), self.max_points):
                return False
            cluster.received_at = self.clock.now()
            self.version += 1
            self._log.touch(cluster.key)
        return True

    def _refuse(self, name: str | None, where: str, why: str) -> None:
        """Count a refused record for the banner; it touches no cluster's row. Called under the lock."""
        self.refused_total += 1
        self.last_refused = Refused(name, where, why, self.clock.now())
        self.version += 1

    def _unreadable(self, name: str | None, row: str | None, where: str, error: str) -> None:
        """Count a record that could not be read, on the page and on `row` (made if need be): the cluster its key
        names, or None (cluster_named)."""
        # Outside text: a reason may quote a record of any size, and the page sends it on every update.
        bad = Unreadable(name, where, error if len(error) <= ERROR_CHARS else error[:ERROR_CHARS] + "...",
                         self.clock.now())
        with self._lock:
            self.unreadable_total += 1
            self.last_unreadable = bad
            if row is not None:
                cluster = self._cluster(row)
                cluster.unreadable += 1
                cluster.last_error = bad
                self._log.touch(row)
            self.version += 1

    def _expire(self) -> None:
        """Drop every cluster silent for longer than the window: its latest observed_at (or, with no readable
        record, its last unreadable one) is older than the window. Called under the lock, at most once a second."""
        now = self.clock.now()
        if self._expired_at is not None and (now - self._expired_at).total_seconds() < 1.0:
            return
        self._expired_at = now
        oldest = now - self.window
        silent = [k for k, c in self._clusters.items()
                  if (c.latest.observed_at if c.latest is not None else
                      c.last_error.at if c.last_error is not None else now) < oldest]
        for k in silent:
            del self._clusters[k]
            self._log.touch(k)
        if silent:
            self.version += 1
            self._log.trim(len(self._clusters))

    def _cluster(self, name: str) -> ClusterHistory:
        cluster = self._clusters.get(name)
        if cluster is None:
            cluster = self._clusters[name] = ClusterHistory(name)
        return cluster

    def records(self, with_points: bool = False, only: str | None = None) -> list[ClusterRecord]:
        """Copies of every cluster's history (or of `only`), with the timeline points when asked."""
        with self._lock:
            self._expire()
            chosen = [self._clusters[only]] if only in self._clusters else [] if only else self._clusters.values()
            return [ClusterRecord(c.key, c.latest_view(), c.received_at, c.unreadable, c.last_error, c.run_start,
                                  c.first_t, c.timeline.copy() if with_points else Points([], [], []))
                    for c in chosen]

    def changes(self, since: int | None) -> Changes:
        """What changed after change number `since`: the changed clusters' copies (without points) and the keys
        that left; every cluster (`full`) when `since` is None or older than what the change log remembers."""
        with self._lock:
            self._expire()
            keys = None if since is None else self._log.since(since)
            if keys is None:
                return Changes(self._log.version, True, [self._copy(c) for c in self._clusters.values()], [])
            live = [self._clusters[k] for k in keys if k in self._clusters]
            return Changes(self._log.version, False, [self._copy(c) for c in live],
                           [k for k in keys if k not in self._clusters])

    @staticmethod
    def _copy(c: ClusterHistory) -> ClusterRecord:
        return ClusterRecord(c.key, c.latest_view(), c.received_at, c.unreadable, c.last_error, c.run_start,
                             c.first_t)

    def point_count(self) -> int:
        with self._lock:
            return sum(len(c.timeline) for c in self._clusters.values())
