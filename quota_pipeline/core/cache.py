"""Steps 1-3 of the decision semantics, streaming form: the volume cache of one cluster held in state.

`apply_snapshot` evicts, upserts and pins, then summarises the entries in force; replay/intervals.py is the
set-based Spark form of the same steps. Both yield a SnapshotSummary, the input of step 4 (decision.py).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from quota_pipeline.core import policy
from quota_pipeline.core.config import Limits
from quota_pipeline.core.model import SnapshotSummary, Status, VolumeSnapshot, WorstVolume, sorted_unique
from quota_pipeline.core.settings import Settings

Key = tuple[int, str]


@dataclass(frozen=True)
class Entry:
    """A cached reading of one log dir. No bytes means it was reported offline (always violates)."""

    broker_id: int
    log_dir: str
    observed_at: dt.datetime
    total_bytes: int | None
    available_bytes: int | None
    pinned: bool = False

    @property
    def available_ratio(self) -> float | None:
        if self.total_bytes is None or self.available_bytes is None:
            return None
        return float(policy.available_ratio(self.available_bytes, self.total_bytes, policy.PY))


@dataclass(frozen=True)
class CacheState:
    """Steps 1-3 state of one cluster: cached readings and the registered brokers of the last SUCCESS."""

    entries: dict[Key, Entry] = field(default_factory=dict)
    registered: frozenset[int] = frozenset()


def apply_snapshot(state: CacheState, snap: VolumeSnapshot, settings: Settings) -> tuple[CacheState, SnapshotSummary]:
    """Steps 1-3 for one snapshot: evict, upsert, then summarise the entries in force."""
    t = snap.observed_at
    entries = {k: e for k, e in state.entries.items() if e.pinned or t < e.observed_at + settings.validity}
    registered = state.registered
    if snap.status is Status.SUCCESS:
        registered = snap.registered_brokers
        for v in snap.volumes:
            key = (v.broker_id, v.log_dir)
            if not v.offline:
                entries[key] = Entry(v.broker_id, v.log_dir, t, v.total_bytes, v.available_bytes)
            elif settings.offline_policy == "violate":
                entries[key] = Entry(v.broker_id, v.log_dir, t, None, None)
            elif settings.offline_policy == "pin":
                existing = entries.get(key)
                entries[key] = replace(existing, pinned=True) if existing else Entry(
                    v.broker_id, v.log_dir, t, None, None, pinned=True)
            # last-known: the cached reading stays and expires like any other.
        if settings.fenced_policy == "pin":
            # A fenced broker takes no writes: its last readings are its current state (Strimzi #40), so a
            # full broker that stops or restarts must not release the throttle by letting them expire.
            fenced = frozenset(snap.fenced_brokers) - frozenset(snap.brokers)
            for key, e in entries.items():
                if e.broker_id in fenced and not e.pinned:
                    entries[key] = replace(e, pinned=True)
    new_state = CacheState(entries, registered)
    in_force = [e for e in entries.values() if not e.pinned or e.broker_id in registered]
    return new_state, summarize(snap, in_force, settings.limits)


def worst_key(factor: float, entry: Entry) -> tuple:
    """Order of 'worst': lowest factor, then lowest ratio (offline first), bytes, broker, log dir.

    replay/intervals.py orders the same struct with Spark's min(), where nulls sort first as None does here.
    """
    ratio = entry.available_ratio
    return (factor, ratio is not None, ratio or 0.0, entry.available_bytes is not None,
            entry.available_bytes or 0, entry.broker_id, entry.log_dir)


def summarize(snap: VolumeSnapshot, in_force: list[Entry], limits: Limits) -> SnapshotSummary:
    factors = [(policy.volume_factor_py(e.available_bytes, e.total_bytes, limits), e) for e in in_force]
    violations = sum(1 for e in in_force if policy.violates_py(e.available_bytes, e.total_bytes, limits))
    worst = min(factors, key=lambda fe: worst_key(*fe), default=None)
    ratios = [r for r in (e.available_ratio for e in in_force) if r is not None]
    success = snap.status is Status.SUCCESS
    expected = snap.registered_brokers if success else frozenset()
    missing = sorted_unique(expected - {e.broker_id for e in in_force})
    return SnapshotSummary(
        cluster_id=snap.cluster_id,
        observed_at=snap.observed_at,
        status=snap.status,
        active_brokers=len(set(snap.brokers)),
        active_log_dirs=len(in_force),
        missing_brokers=missing,
        violations=violations,
        policy_factor=min((f for f, _ in factors), default=1.0),
        complete=success and not missing,
        worst_volume=None if worst is None else WorstVolume(
            worst[1].broker_id, worst[1].log_dir, worst[1].available_bytes, worst[1].available_ratio),
        min_available_ratio=min(ratios, default=None),
    )
