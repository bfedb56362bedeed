"""Steps 1-3 of the decision semantics in plain Python, the reference: the volume cache of one cluster.

`apply_snapshot` evicts, upserts and pins, then summarises the entries in force into a SnapshotSummary, the input of
step 4 (decision.py). Neither job runs this: both run the compiled decision (core/compiled/), which the property
tests hold equal to it.
Each reading also carries its log dir's fill rate, fitted over the key's recent readings (trend.py), and its largest
partitions, so that the record can say which log dirs come next and what fills them.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from quota_pipeline.core.reference import policy, trend
from quota_pipeline.core.model import (
    OFFLINE, OFFLINE_FILLING, ClosestVolume, PartitionSize, PredictiveThrottle, SnapshotSummary, Status, Volume, VolumeSnapshot, WorstVolume, epoch_micros,
    sorted_unique,
)
from quota_pipeline.core.exemption import StopExemption
from quota_pipeline.core.settings import Settings

Key = tuple[int, str]


@dataclass(frozen=True)
class CachedReading:
    """A cached reading of one log dir. No bytes means it was reported offline (always violates)."""

    broker_id: int
    log_dir: str
    observed_at: dt.datetime
    total_bytes: int | None
    available_bytes: int | None
    pinned: bool = False
    fill_rate: float | None = None  # bytes/s lost, fitted when the reading was taken; None unless filling
    top_partitions: tuple[PartitionSize, ...] = ()
    # Pinned because its broker was fenced: the reading predates the broker's current run, so it says nothing of
    # the dir the broker brings back (it may have filled while the broker was down).
    fenced_pin: bool = False
    # Seconds to the hard limit by the lower envelope of the key's readings over the ETA window, when the reading
    # was taken (trend.envelope_eta: the predictive step's, apart from the record's short fill rate and its ETA);
    # None unless filling, with too few buckets, or with the predictive policy off.
    eta_seconds: float | None = None
    # The topics with a replica on the dir at the reading (Volume.topics), kept as its top partitions are (an
    # offline entry pinned from a reading keeps the reading's); None when not known, as for an offline entry
    # without a reading.
    topics: tuple[str, ...] | None = None

    @property
    def available_ratio(self) -> float | None:
        if self.total_bytes is None or self.available_bytes is None:
            return None
        return float(policy.available_ratio(self.available_bytes, self.total_bytes, policy.PY))


@dataclass(frozen=True)
class CacheState:
    """Steps 1-3 state of one cluster: cached readings and the registered brokers of the last SUCCESS."""

    entries: dict[Key, CachedReading] = field(default_factory=dict)
    registered: frozenset[int] = frozenset()
    # The last few (observed_at µs, available bytes) readings per key, for fill rates; kept apart from the
    # entries because a reading that expired still tells how fast its log dir was filling, and kept while the key
    # is cached (a pinned reading's last step stays known).
    history: dict[Key, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    # Per key, each ETA-window bucket's least reading (observed_at µs, available bytes) and its most available bytes,
    # oldest first, within the window and since the last clean-up (trend.add_reading); kept like `history`, and only
    # with the predictive policy on.
    buckets: dict[Key, tuple[tuple[int, int, int], ...]] = field(default_factory=dict)


def apply_snapshot(state: CacheState, snap: VolumeSnapshot, settings: Settings) -> tuple[CacheState, SnapshotSummary]:
    """Steps 1-3 for one snapshot: evict, upsert, then summarise the entries in force."""
    t = snap.observed_at
    entries = {k: e for k, e in state.entries.items() if e.pinned or t < e.observed_at + settings.validity}
    registered = state.registered
    t_us = epoch_micros(t)
    # A key's readings outlive its reading's expiry by a validity (a fill rate still needs them) and stay for as long
    # as it is cached: a pinned reading of a dir that went offline keeps its last step (`onset`) however long it
    # stays offline, as it keeps its fitted rate.
    history = {k: h for k, h in state.history.items() if k in entries or trend.recent(h, t_us, settings.validity)}
    predictive = settings.eta_horizon > dt.timedelta(0)
    bucket_us = trend.bucket_micros(settings.eta_window)
    buckets = {k: w for k, b in state.buckets.items() if (w := trend.in_window(b, t_us, bucket_us))} \
        if predictive else {}
    if observation(snap):
        registered = snap.registered_brokers
        for v in snap.volumes:
            key = (v.broker_id, v.log_dir)
            if not v.offline:
                history[key] = (history.get(key, ()) + ((t_us, v.available_bytes),))[-trend.FILL_READINGS:]
                eta = None
                if predictive:
                    buckets[key] = trend.add_reading(buckets.get(key, ()), t_us, v.available_bytes, bucket_us)
                    eta = trend.envelope_eta(buckets[key], policy.limit_bytes(settings.limits.hard, v.total_bytes,
                                                                              policy.PY))
                entries[key] = _reading(v, t, trend.fill_rate(trend.recent(history[key], t_us, settings.validity)),
                                        eta)
            elif settings.offline_policy == "violate":
                entries[key] = CachedReading(v.broker_id, v.log_dir, t, None, None)
            elif settings.offline_policy == "pin":
                existing = entries.get(key)
                if existing is not None and reached_by(existing, t_us, settings, onset(history.get(key, ()), settings)):
                    entries[key] = went_offline_filling(existing)
                elif existing is None or existing.fenced_pin:
                    # No reading of the broker's current run: a dir that is offline when its broker comes back may
                    # have filled while it was down, and a reading from before cannot tell a failed disk from that.
                    entries[key] = CachedReading(v.broker_id, v.log_dir, t, None, None, pinned=True)
                else:
                    entries[key] = replace(existing, pinned=True)
            # last-known: the cached reading stays and expires like any other.
        if settings.fenced_policy == "pin":
            # A fenced broker takes no writes: its last readings are its current state (Strimzi #40), so a
            # full broker that stops or restarts must not release the throttle by letting them expire.
            fenced = frozenset(snap.fenced_brokers) - frozenset(snap.brokers)
            for key, e in entries.items():
                if e.broker_id in fenced and not e.pinned:
                    entries[key] = replace(e, pinned=True, fenced_pin=True)
    new_state = CacheState(entries, registered, history, buckets)
    in_force = [e for e in entries.values() if not e.pinned or e.broker_id in registered]
    return new_state, summarize(snap, in_force, settings)


def observation(snap: VolumeSnapshot) -> bool:
    """A poll that observed brokers: SUCCESS, or a partial view (a failed poll that lists the volumes of the brokers
    that answered DescribeLogDirs). A failed poll without volumes observed nothing."""
    return snap.status is Status.SUCCESS or bool(snap.volumes)


def missing_brokers(snap: VolumeSnapshot, in_force: list[CachedReading]) -> tuple[int, ...]:
    """The registered brokers of an observation without an entry in force and, in a partial view, the active
    brokers that did not answer (no volume of theirs in it), whatever they have cached; none for a failed poll."""
    if not observation(snap):
        return ()
    missing = snap.registered_brokers - {e.broker_id for e in in_force}
    if snap.status is not Status.SUCCESS:
        missing |= frozenset(snap.brokers) - {v.broker_id for v in snap.volumes}
    return sorted_unique(missing)


def onset(history: tuple[tuple[int, int], ...], settings: Settings) -> float | None:
    """The key's last step of filling (trend.onset_rate) over its readings within the validity of the newest: the
    step of the cached reading (the newest), whatever the time since it, as its fitted rate is."""
    return trend.onset_rate(trend.recent(history, history[-1][0], settings.validity)) if history else None


def reached_by(e: CachedReading, t_us: int, settings: Settings, onset_rate: float | None = None) -> bool:
    """An offline log dir whose cached reading `e` was filling: has it reached the hard limit by `t_us`?

    The last available bytes minus the fill rate times the time since that reading, against the hard limit (bytes,
    or ratio of the last total). The rate is the larger of the reading's fill rate (fitted over the readings before
    it went offline) and `onset_rate`, the last step before it went offline: a fill that began just before is
    diluted in a fit over flat readings. No rate (steady, freeing, or a single reading) never reaches it.
    core/compiled/arithmetic.py's `reached`, operation for operation.
    """
    rates = [r for r in (e.fill_rate, onset_rate) if r is not None]
    if e.available_bytes is None or e.total_bytes is None or not rates:
        return False
    estimate = e.available_bytes - max(rates) * ((t_us - epoch_micros(e.observed_at)) / 1e6)
    return policy.violates_py(estimate, e.total_bytes, settings.limits)


def went_offline_filling(e: CachedReading) -> CachedReading:
    """The pinned offline entry of a dir that filled up before it went offline: no bytes (it violates as any
    offline entry), with the fill rate, top partitions and topics of its last reading for the record."""
    return replace(e, total_bytes=None, available_bytes=None, pinned=True, fenced_pin=False)


def _reading(v: Volume, t: dt.datetime, fill_rate: float | None, eta_seconds: float | None) -> CachedReading:
    return CachedReading(v.broker_id, v.log_dir, t, v.total_bytes, v.available_bytes, fill_rate=fill_rate,
                 top_partitions=v.top_partitions, eta_seconds=eta_seconds, topics=v.topics)


def closest_key(headroom: float | None, entry: CachedReading) -> tuple:
    """Order of 'closest to the hard limit': offline first, then least headroom, broker, log dir (as
    core/compiled/arithmetic.py's closer)."""
    return (headroom is not None, headroom if headroom is not None else 0.0, entry.broker_id, entry.log_dir)


def closest_volumes(in_force: list[CachedReading], settings: Settings) -> tuple[ClosestVolume, ...]:
    """The settings.closest_volumes entries in force nearest the hard limit, nearest first."""
    def headroom(e: CachedReading) -> float | None:
        if e.available_bytes is None or e.total_bytes is None:
            return None
        return e.available_bytes - policy.limit_bytes(settings.limits.hard, e.total_bytes, policy.PY)

    ranked = sorted(((headroom(e), e) for e in in_force), key=lambda he: closest_key(*he))
    return tuple(ClosestVolume(e.broker_id, e.log_dir, e.available_bytes, e.total_bytes, e.available_ratio, h,
                               e.fill_rate, 0.0 if offline_reason(e) == OFFLINE_FILLING else
                               trend.eta_seconds(h, e.fill_rate), e.top_partitions, offline_reason(e))
                 for h, e in ranked[:settings.closest_volumes])


def offline_reason(e: CachedReading) -> str | None:
    """Why an entry without bytes violates: reported offline after filling up (it keeps its fill rate), or
    reported offline with no reading to judge it by (or under the `violate` policy); None for a reading."""
    if e.available_bytes is not None and e.total_bytes is not None:
        return None
    return OFFLINE if e.fill_rate is None else OFFLINE_FILLING


def worst_key(factor: float, entry: CachedReading) -> tuple:
    """Order of 'worst': lowest factor, then lowest ratio (offline first), bytes, broker, log dir.

    core/compiled/arithmetic.py's worse compares the same fields in the same order.
    """
    ratio = entry.available_ratio
    return (factor, ratio is not None, ratio or 0.0, entry.available_bytes is not None,
            entry.available_bytes or 0, entry.broker_id, entry.log_dir)


def eta_factor(e: CachedReading, settings: Settings) -> tuple[float, float | None]:
    """The predictive step for one entry in force: (its ETA / the horizon clamped to 0..1, the ETA in seconds), the
    ETA its reading carries; (1.0, None) with the policy off, without an ETA (not filling), or offline."""
    if settings.eta_horizon <= dt.timedelta(0) or e.available_bytes is None or e.total_bytes is None or \
            e.eta_seconds is None:
        return 1.0, None
    return trend.eta_factor(e.eta_seconds, settings.eta_horizon.total_seconds()), e.eta_seconds


def predictive_throttle(etas: list[tuple[float, float | None, CachedReading]], limits_factor: float,
                        settings: Settings) -> PredictiveThrottle | None:
    """The entry whose predictive factor is the least (ties: broker, log dir), when it lowers the factor: below 1
    and below `limits_factor`, the least volume factor of the limits (core/compiled/steps.py's entries_in_force)."""
    least = min(etas, key=lambda fe: (fe[0], fe[2].broker_id, fe[2].log_dir), default=None)
    if least is None or not (least[0] < 1.0 and least[0] < limits_factor) or least[1] is None:
        return None
    return PredictiveThrottle(least[2].broker_id, least[2].log_dir, least[1], settings.eta_horizon.total_seconds())


def stop_topics(violating: list[CachedReading], exemption: StopExemption) -> tuple[str, ...] | None:
    """The sorted union of the violating entries' topics that a stop refuses (not those `exemption` lets through):
    what a stop refuses, so that every other topic keeps producing (a full dir grows only through its partitions).
    None when none violates (a factor of 0 then comes from the fallback or the predictive step: nothing to point at)
    or when one's topics are not known."""
    if not violating or any(e.topics is None for e in violating):
        return None
    return exemption.refusable(set().union(*(e.topics for e in violating)))


def summarize(snap: VolumeSnapshot, in_force: list[CachedReading], settings: Settings) -> SnapshotSummary:
    limits = settings.limits
    volume = [policy.volume_factor_py(e.available_bytes, e.total_bytes, limits) for e in in_force]
    etas = [(*eta_factor(e, settings), e) for e in in_force]
    # Each log dir's factor is the least of its limits' and its predictive one.
    factors = [(min(f, fe[0]), e) for f, fe, e in zip(volume, etas, in_force)]
    violating = [e for e in in_force if policy.violates_py(e.available_bytes, e.total_bytes, limits)]
    worst = min(factors, key=lambda fe: worst_key(*fe), default=None)
    ratios = [r for r in (e.available_ratio for e in in_force) if r is not None]
    missing = missing_brokers(snap, in_force)
    return SnapshotSummary(
        cluster_id=snap.cluster_id,
        observed_at=snap.observed_at,
        status=snap.status,
        active_brokers=len(set(snap.brokers)),
        active_log_dirs=len(in_force),
        missing_brokers=missing,
        violations=len(violating),
        policy_factor=min((f for f, _ in factors), default=1.0),
        complete=snap.status is Status.SUCCESS and not missing,
        partial=snap.status is not Status.SUCCESS and observation(snap),
        worst_volume=None if worst is None else WorstVolume(
            worst[1].broker_id, worst[1].log_dir, worst[1].available_bytes, worst[1].available_ratio),
        min_available_ratio=min(ratios, default=None),
        closest_volumes=closest_volumes(in_force, settings),
        predictive=predictive_throttle(etas, min(volume, default=1.0), settings),
        stop_topics=stop_topics(violating, settings.exemption),
    )
