"""Bounded history of the decision topic: every readable record per cluster within a window, the latest in full."""
from __future__ import annotations

import bisect
import datetime as dt
import threading
from collections import deque
from dataclasses import dataclass, field

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.dashboard.records import DecisionView, parse_record

DEFAULT_WINDOW = dt.timedelta(hours=6)
DEFAULT_MAX_POINTS = 3600


@dataclass(frozen=True)
class Point:
    """One decision on the timeline: observed_at in epoch seconds, its factor and minimum available ratio."""

    t: float
    factor: float
    min_ratio: float | None


@dataclass(frozen=True)
class Unreadable:
    """A record that could not be read: where it is on the topic and why."""

    key: str | None
    where: str
    error: str
    at: dt.datetime


@dataclass
class ClusterHistory:
    """One record key's timeline; `run_start` is where its current run of factor < 1 begins (None: not throttled)."""

    key: str
    points: deque[Point]
    latest: DecisionView | None = None
    received_at: dt.datetime | None = None
    unreadable: int = 0
    last_error: Unreadable | None = None
    run_start: float | None = None
    first_t: float | None = None  # the oldest observed_at ever seen: a run starting there may have started earlier

    def add(self, view: DecisionView, window_seconds: float) -> bool:
        """Insert in observed_at order; False for a record older than the window. The latest observed_at wins."""
        point = Point(view.observed_at.timestamp(), view.throttle_factor, view.min_available_ratio)
        newest = max(point.t, self.points[-1].t if self.points else point.t)
        if point.t < newest - window_seconds:
            return False
        self.first_t = point.t if self.first_t is None else min(self.first_t, point.t)
        if not self.points or point.t > self.points[-1].t:
            continuing = bool(self.points) and self.points[-1].factor < 1.0 and self.run_start is not None
            self.points.append(point)
            self.run_start = None if point.factor >= 1.0 else (self.run_start if continuing else point.t)
        else:  # the same snapshot published again (a re-run micro-batch), or a late record: rare
            self._insert(point)
            self.run_start = _run_start(self.points)
        while self.points and self.points[0].t < newest - window_seconds:
            self.points.popleft()
        if self.latest is None or view.observed_at >= self.latest.observed_at:
            self.latest = view
        return True

    def _insert(self, point: Point) -> None:
        ordered = list(self.points)
        index = bisect.bisect_left([p.t for p in ordered], point.t)
        if index < len(ordered) and ordered[index].t == point.t:
            ordered[index] = point
        else:
            ordered.insert(index, point)
        self.points = deque(ordered[-self.points.maxlen:] if self.points.maxlen else ordered,
                            maxlen=self.points.maxlen)


def _run_start(points: deque[Point]) -> float | None:
    start = None
    for p in reversed(points):
        if p.factor >= 1.0:
            break
        start = p.t
    return start


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
    points: tuple[Point, ...] = ()


@dataclass
class History:
    """Every readable record of every cluster within `window` (at most `max_points` each); thread-safe."""

    window: dt.timedelta = DEFAULT_WINDOW
    max_points: int = DEFAULT_MAX_POINTS
    clock: Clock = SYSTEM
    version: int = 0  # changes whenever what the page shows changes
    unreadable_total: int = 0
    last_unreadable: Unreadable | None = None
    _clusters: dict[str, ClusterHistory] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, key: bytes | None, value: bytes | None, where: str = "") -> bool:
        """Take one topic record; False when it could not be read or is outside the window. Never raises."""
        name = key.decode("utf-8", "replace") if key is not None else None
        if value is None:
            with self._lock:
                if name is not None and self._clusters.pop(name, None) is not None:
                    self.version += 1  # a tombstone retires the cluster
            return False
        try:
            view, _ = parse_record(value)
        except (ValueError, RecursionError) as exc:  # JSON, rules, unicode; deep nesting
            self._unreadable(name, where, str(exc))
            return False
        with self._lock:
            cluster = self._cluster(name or view.cluster_id)
            if not cluster.add(view, self.window.total_seconds()):
                return False
            cluster.received_at = self.clock.now()
            self.version += 1
        return True

    def _unreadable(self, name: str | None, where: str, error: str) -> None:
        bad = Unreadable(name, where, error, self.clock.now())
        with self._lock:
            self.unreadable_total += 1
            self.last_unreadable = bad
            if name is not None:
                cluster = self._cluster(name)
                cluster.unreadable += 1
                cluster.last_error = bad
            self.version += 1

    def _cluster(self, name: str) -> ClusterHistory:
        cluster = self._clusters.get(name)
        if cluster is None:
            cluster = self._clusters[name] = ClusterHistory(name, deque(maxlen=self.max_points))
        return cluster

    def records(self, with_points: bool = False, only: str | None = None) -> list[ClusterRecord]:
        """Copies of every cluster's history (or of `only`), with the timeline points when asked."""
        with self._lock:
            chosen = [self._clusters[only]] if only in self._clusters else [] if only else self._clusters.values()
            return [ClusterRecord(c.key, c.latest, c.received_at, c.unreadable, c.last_error, c.run_start,
                                  c.first_t, tuple(c.points) if with_points else ())
                    for c in chosen]

    def point_count(self) -> int:
        with self._lock:
            return sum(len(c.points) for c in self._clusters.values())
