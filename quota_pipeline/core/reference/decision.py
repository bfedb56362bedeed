"""Step 4 of the decision semantics: decide on an observation, retain within validity, or fall back.

The reference, after cache.apply_snapshot: core/compiled/steps.py compiles the same step for both jobs, held equal to
this by the property tests. `step` runs one snapshot through all four steps.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from quota_pipeline.core.reference.cache import CacheState, apply_snapshot
from quota_pipeline.core.model import Decision, DecisionSource, SnapshotSummary, VolumeSnapshot
from quota_pipeline.core.settings import Settings


def initial_decision(first_observed_at: dt.datetime) -> Decision:
    return Decision(1.0, DecisionSource.OBSERVATION, first_observed_at)


def advance(current: Decision | None, s: SnapshotSummary, settings: Settings) -> Decision:
    """Step 4: decide on an observation, retain within validity, or fall back (and stay there)."""
    if current is None:
        current = initial_decision(s.observed_at)
    # A violation stops at once on any observation, a partial view included; only a release needs a complete one
    # (complete is SUCCESS with every registered broker covered).
    if s.observation and (s.violating or s.complete):
        factor, source, valid_from = s.policy_factor, DecisionSource.OBSERVATION, s.observed_at
    elif current.source is DecisionSource.FALLBACK or s.observed_at > current.valid_from + settings.validity:
        factor, source, valid_from = settings.fallback_factor, DecisionSource.FALLBACK, current.valid_from
    else:
        factor, source, valid_from = current.factor, DecisionSource.RETAINED, current.valid_from
    return Decision(factor, source, valid_from, throttled_since(current, factor, s.observed_at))


def throttled_since(current: Decision, factor: float, t: dt.datetime) -> dt.datetime | None:
    """When the run of factors below 1 that `factor` belongs to began; None when it is 1 (not throttled)."""
    if factor >= 1.0:
        return None
    return current.throttled_since if current.factor < 1.0 and current.throttled_since else t


@dataclass
class DecisionState:
    """What the reference carries per cluster from one snapshot to the next: the cache and the decision in force."""

    cache: CacheState = field(default_factory=CacheState)
    decision: Decision | None = None


def step(state: DecisionState, snap: VolumeSnapshot, settings: Settings) -> tuple[SnapshotSummary, Decision]:
    """One snapshot through all four steps; mutates `state` in place."""
    state.cache, summary = apply_snapshot(state.cache, snap, settings)
    state.decision = advance(state.decision, summary, settings)
    return summary, state.decision


def decide_all(snapshots: Iterable[VolumeSnapshot], settings: Settings) -> Iterator[tuple[SnapshotSummary, Decision]]:
    """Reference run over a journal: per cluster, in observed_at order (stable for equal times)."""
    states: dict[str, DecisionState] = {}
    for snap in sorted(snapshots, key=lambda s: (s.cluster_id, s.observed_at)):
        yield step(states.setdefault(snap.cluster_id, DecisionState()), snap, settings)
