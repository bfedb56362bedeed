"""A month of one cluster whose disks react to the throttle factor: daily peaks, retention's sawtooth, two fill
incidents (issue 21's proof on history). The recorded journal is this model run under the cluster's own policy;
`closed_loop` runs it under another setting, the factor in force slowing what producers write.

The model, per log dir (3 brokers x 4 dirs of 1 TiB): producers write a share of the cluster's rate, which has a
daily peak (14:00 UTC, 1.8x the mean, 0.2x at night), a weekday amplitude drawn per day and quieter weekends, times
the factor in force (decided at the previous snapshot). Writes land in 15-minute segments; the retention check
(every 5 minutes, one phase per broker) deletes the segments older than 7 days, so used bytes rise between
deletions and fall at each: a sawtooth whose trend is this week's production minus last week's. Incidents:

1. A runaway producer (a backfill at 40 MiB/s, replication factor 3: one log dir per broker, each broker's fullest)
   from day 9 12:30 UTC; its topic is deleted 4 hours later.
2. A new topic with unlimited retention (20 MiB/s across the cluster, as its partitions' replicas spread) from day
   20 06:00 UTC, never deleted by retention; its owners delete it 36 hours later.

Deletions do not depend on the factor (they free what was written a week ago), so a throttle that slows production
below them lets a filling disk settle above the hard limit.
"""
from __future__ import annotations

import datetime as dt
import math
import random
from dataclasses import dataclass, field

import numpy as np

from quota_pipeline.core.reference import policy
from quota_pipeline.core.reference.decision import DecisionState, step
from quota_pipeline.core.model import Status, Volume, VolumeSnapshot
from quota_pipeline.core.settings import Settings

GIB, MIB = 1024 ** 3, 1024 ** 2
CLUSTER = "month"
START = dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc)  # a Monday
DAYS = 30
BROKERS, DIRS = 3, 4
TOTAL = 1024 * GIB
MEAN_RATE = 1.2 * MIB            # bytes/s written per log dir on average (replicas included)
RETENTION_S = 7 * 86_400
SEGMENT_S = 900                  # segments roll every 15 minutes
CHECK_S = 300                    # Kafka's log.retention.check.interval.ms default
BASE_USED = 60 * GIB             # compacted topics and the like: never deleted by time
INCIDENT_1 = (8 * 86_400 + 12.5 * 3600, 4 * 3600, 40 * MIB)   # (start, duration, bytes/s per affected dir)
INCIDENT_2 = (19 * 86_400 + 6 * 3600, 36 * 3600, 20 * MIB)     # (start, duration, bytes/s for the whole cluster)


@dataclass
class Disk:
    """One log dir: its share of production, used bytes, bytes per segment not yet deleted, incidents' bytes."""

    broker: int
    name: str
    share: float
    used: float = 0.0
    segments: dict[int, float] = field(default_factory=dict)
    incident: list[float] = field(default_factory=lambda: [0.0, 0.0])


class MonthCluster:
    """The cluster's disks over the month, advanced one interval at a time under the factor in force."""

    def __init__(self, seed: int = 21, start: dt.datetime = START, days: int = DAYS):
        rng = random.Random(seed)
        self.start, self.days = start, days
        self.t0 = start.timestamp()
        # A weekday's amplitude, drawn per day (the week before the journal included); weekends are quieter.
        self.amplitude = {d: (0.65 if (start + dt.timedelta(days=d)).weekday() >= 5 else 1.0) *
                          max(0.6, rng.gauss(1.0, 0.15)) for d in range(-8, days + 1)}
        self.disks = [Disk(b, f"/data/{d}", rng.uniform(0.85, 1.15)) for b in range(1, BROKERS + 1)
                      for d in range(DIRS)]
        for disk in self.disks:  # the week before: segments written at full speed
            for k in range(-RETENTION_S // SEGMENT_S, 0):
                disk.segments[k] = self.rate(disk, (k + 0.5) * SEGMENT_S) * SEGMENT_S
            disk.used = BASE_USED + sum(disk.segments.values())
        # Incident 1 hits each broker's fullest log dir.
        self.runaway = {max((d for d in self.disks if d.broker == b), key=lambda d: d.used).name + f"@{b}"
                        for b in range(1, BROKERS + 1)}
        self.phase = {b: (b - 1) * CHECK_S / BROKERS for b in range(1, BROKERS + 1)}
        self.now = 0.0  # seconds since start
        self.written = 0.0  # bytes producers wrote (under the factors in force)
        self.wanted = 0.0   # bytes they would have written at factor 1

    def rate(self, disk: Disk, s: float) -> float:
        """Bytes/s producers write to `disk` at `s` seconds since the start, unthrottled, incidents aside."""
        day = math.floor(s / 86_400)
        hour = (s % 86_400) / 3600
        return MEAN_RATE * disk.share * self.amplitude[day] * (1.0 + 0.8 * math.cos(2 * math.pi * (hour - 14) / 24))

    def incident_rates(self, disk: Disk, s: float) -> tuple[float, float]:
        """Bytes/s the two incidents' producers write to `disk` at `s`, unthrottled."""
        a, length, rate = INCIDENT_1
        one = rate if a <= s < a + length and f"{disk.name}@{disk.broker}" in self.runaway else 0.0
        a, length, rate = INCIDENT_2
        two = rate / len(self.disks) if a <= s < a + length else 0.0
        return one, two

    def advance(self, seconds: float, factor: float) -> None:
        """`seconds` more under `factor`: writes (in steps of at most a minute), retention checks, clean-ups."""
        end = self.now + seconds
        while self.now < end - 1e-9:
            dt_s = min(60.0, end - self.now)
            mid = self.now + dt_s / 2
            for disk in self.disks:
                base = self.rate(disk, mid) * dt_s * factor
                one, two = (r * dt_s * factor for r in self.incident_rates(disk, mid))
                disk.used += base + one + two
                self.written += base + one + two
                self.wanted += (base + one + two) / factor if factor > 0 else \
                    (self.rate(disk, mid) + sum(self.incident_rates(disk, mid))) * dt_s
                seg = math.floor(mid / SEGMENT_S)
                disk.segments[seg] = disk.segments.get(seg, 0.0) + base
                disk.incident[0] += one
                disk.incident[1] += two
            self._checks(self.now, self.now + dt_s)
            self._clean_ups(self.now, self.now + dt_s)
            self.now += dt_s

    def _checks(self, lo: float, hi: float) -> None:
        """The retention checks in (lo, hi]: each deletes its broker's segments that ended over 7 days ago."""
        for disk in self.disks:
            phase = self.phase[disk.broker]
            k = math.floor((hi - phase) / CHECK_S)
            at = phase + k * CHECK_S
            if not lo < at <= hi:
                continue
            while disk.segments:  # oldest first: dicts keep the order segments were opened in
                seg = next(iter(disk.segments))
                if (seg + 1) * SEGMENT_S > at - RETENTION_S:
                    break
                disk.used -= disk.segments.pop(seg)

    def _clean_ups(self, lo: float, hi: float) -> None:
        """The operators' fixes: each incident's topic deleted when its time is up."""
        for i, (a, length, _) in enumerate((INCIDENT_1, INCIDENT_2)):
            if lo < a + length <= hi:
                for disk in self.disks:
                    disk.used -= disk.incident[i]
                    disk.incident[i] = 0.0

    def snapshot(self) -> VolumeSnapshot:
        """What the observer reads now."""
        t = self.start + dt.timedelta(seconds=self.now)
        volumes = tuple(Volume(d.broker, d.name, TOTAL, int(TOTAL - min(TOTAL, max(0.0, d.used))))
                        for d in self.disks)
        return VolumeSnapshot(CLUSTER, t, Status.SUCCESS, tuple(range(1, BROKERS + 1)), (), volumes)


@dataclass
class Run:
    """The month under one setting: per snapshot its time (s since the start), the factor it decided, the least
    headroom above the hard limit read, and the bytes producers wrote and wanted to write (at factor 1) since the
    previous snapshot; the snapshots themselves when kept (the journal)."""

    t_s: np.ndarray
    factor: np.ndarray
    headroom: np.ndarray
    written: np.ndarray
    wanted: np.ndarray
    snapshots: list[VolumeSnapshot]


def closed_loop(settings: Settings, interval: dt.timedelta = dt.timedelta(seconds=60), seed: int = 21,
                days: int = DAYS, keep: bool = False) -> Run:
    """The month under `settings`: every interval the disks advance under the factor the last snapshot decided
    (the reference decision functions, core/reference/decision.py), then the observer reads them and the next is decided."""
    cluster = MonthCluster(seed, days=days)
    state = DecisionState()
    step_s = interval.total_seconds()
    n = int(days * 86_400 / step_s)
    t, factor, head, written, wanted = (np.zeros(n) for _ in range(5))
    kept = []
    for i in range(n):
        if i:
            w0, u0 = cluster.written, cluster.wanted
            cluster.advance(step_s, factor[i - 1])
            written[i], wanted[i] = cluster.written - w0, cluster.wanted - u0
        snap = cluster.snapshot()
        factor[i] = step(state, snap, settings)[1].factor
        t[i] = cluster.now
        head[i] = min(v.available_bytes - policy.limit_bytes(settings.limits.hard, v.total_bytes, policy.PY)
                      for v in snap.volumes)
        if keep:
            kept.append(snap)
    return Run(t, factor, head, written, wanted, kept)
