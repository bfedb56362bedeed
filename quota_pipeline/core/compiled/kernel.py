"""The compiled decision's loop: one cluster's snapshots in time order through steps 1-4, compiled by numba.

Both jobs run it (core/compiled/cluster_pass.py drives it). The steps are core/compiled/steps.py's, inlined here;
core/reference/ states them in plain Python, and the property tests hold the two equal to the last bit (the same
sequence of steps, the float operations in the same order). One call advances a cluster by a chunk of snapshots; the
cache is a set of arrays (one slot per log dir) carried from chunk to chunk, so memory is bounded by the chunk and the
number of log dirs, never by the length of the journal. Log dirs are numbered in (broker_id, log_dir) order, which is
the last tie-break of "worst" and "closest", so comparing numbers compares keys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from quota_pipeline.core.compiled import numba_cache, steps
from quota_pipeline.core.compiled.codes import BYTES, FALLBACK, NO_LIMIT, NONE, OFFLINE_POLICY_CODES, RATIO
from quota_pipeline.core.config import Limit
from quota_pipeline.core.model import micros
from quota_pipeline.core.reference.trend import ETA_BUCKETS, FILL_READINGS, bucket_micros
from quota_pipeline.core.settings import Settings

numba_cache.install()  # before the functions below are compiled


@dataclass(frozen=True)
class Params:
    """Settings as the numbers the kernel reads."""

    validity_us: int
    hard_kind: int
    hard_value: float
    soft_kind: int
    soft_value: float
    fallback: float
    offline: int
    fenced_pin: bool
    closest: int
    eta_horizon_s: float  # 0.0: the predictive step is off
    bucket_us: int        # one ETA-window bucket (trend.bucket_micros)

    @classmethod
    def of(cls, s: Settings) -> "Params":
        def kind(limit: Limit | None) -> int:
            return NO_LIMIT if limit is None else BYTES if limit.kind == "bytes" else RATIO

        soft = s.limits.soft
        return cls(micros(s.validity), kind(s.limits.hard), float(s.limits.hard.value), kind(soft),
                   0.0 if soft is None else float(soft.value), float(s.fallback_factor),
                   OFFLINE_POLICY_CODES[s.offline_policy], s.fenced_policy == "pin", s.closest_volumes,
                   s.eta_horizon.total_seconds(), bucket_micros(s.eta_window))

    def tuple(self) -> tuple:
        return (self.validity_us, self.hard_kind, self.hard_value, self.soft_kind, self.soft_value, self.fallback,
                self.offline, self.fenced_pin, self.closest, self.eta_horizon_s, self.bucket_us)


@dataclass
class State:
    """One cluster between chunks: the cached reading per log dir (numbered as the chunk's keys), the fill-rate
    history, the registered brokers of the last SUCCESS (by broker number) and the decision in force."""

    has: np.ndarray         # bool[K]: a reading (or offline report) is cached
    pinned: np.ndarray      # int8[K]: 0 not pinned, 1 pinned, FENCED_PIN pinned because its broker was fenced
    observed: np.ndarray    # int64[K] µs
    total: np.ndarray       # int64[K]
    available: np.ndarray   # int64[K]
    offline: np.ndarray     # bool[K]: no bytes
    fill: np.ndarray        # float64[K], NaN when not filling
    row: np.ndarray         # int64[K]: the input row the reading came from (its top partitions), NONE if offline
    #                         (an offline dir that filled up keeps its last reading's row and fill rate)
    hist_t: np.ndarray      # int64[K, FILL_READINGS]: the key's last readings, oldest first
    hist_a: np.ndarray      # int64[K, FILL_READINGS]
    hist_n: np.ndarray      # int64[K]
    registered: np.ndarray  # bool[B]
    decision: np.ndarray    # float64[5]: has, factor, source, valid_from µs, throttled_since µs (NONE)
    # The predictive step (reference: CachedReading.eta_seconds, CacheState.buckets); untouched while it is off.
    eta: np.ndarray         # float64[K]: the cached reading's ETA by the envelope (s), NaN when none
    env_t: np.ndarray       # int64[K, ETA_BUCKETS]: each bucket's least reading, oldest first
    env_a: np.ndarray       # int64[K, ETA_BUCKETS]
    env_n: np.ndarray       # int64[K]
    env_m: np.ndarray       # int64[K, ETA_BUCKETS]: each bucket's most available bytes

    @classmethod
    def empty(cls, keys: int, brokers: int) -> "State":
        return cls(np.zeros(keys, bool), np.zeros(keys, np.int8), np.zeros(keys, np.int64), np.zeros(keys, np.int64),
                   np.zeros(keys, np.int64), np.zeros(keys, bool), np.full(keys, np.nan), np.full(keys, NONE, np.int64),
                   np.zeros((keys, FILL_READINGS), np.int64), np.zeros((keys, FILL_READINGS), np.int64),
                   np.zeros(keys, np.int64), np.zeros(brokers, bool), np.array([0.0, 1.0, 0.0, 0.0, NONE]),
                   np.full(keys, np.nan), np.zeros((keys, ETA_BUCKETS), np.int64),
                   np.zeros((keys, ETA_BUCKETS), np.int64), np.zeros(keys, np.int64),
                   np.zeros((keys, ETA_BUCKETS), np.int64))

    def remap(self, key_of: np.ndarray, keys: int, broker_of: np.ndarray, brokers: int) -> "State":
        """The same state numbered for a new chunk: old key i becomes key_of[i], old broker j broker_of[j]."""
        out = State.empty(keys, brokers)
        for name in ("has", "pinned", "observed", "total", "available", "offline", "fill", "row", "hist_t",
                     "hist_a", "hist_n", "eta", "env_t", "env_a", "env_n", "env_m"):
            getattr(out, name)[key_of] = getattr(self, name)
        out.registered[broker_of] = self.registered
        out.decision = self.decision.copy()
        return out


@dataclass
class SnapshotColumns:
    """Snapshots of one cluster in time order (unique times) with their volume rows grouped by snapshot, as the loop
    reads them."""

    t: np.ndarray           # int64[S] µs
    ok: np.ndarray          # bool[S]: status SUCCESS
    brokers_at: np.ndarray  # int64[S+1]: offsets into brokers
    brokers: np.ndarray     # int64: broker numbers (0..B-1, in broker id order)
    fenced_at: np.ndarray   # int64[S+1]
    fenced: np.ndarray      # int64
    rows_at: np.ndarray     # int64[S+1]: offsets into the row arrays
    key: np.ndarray         # int64[R]: log dir number (0..K-1, in (broker_id, log_dir) order)
    total: np.ndarray       # int64[R]
    available: np.ndarray   # int64[R]
    offline: np.ndarray     # bool[R]
    row: np.ndarray         # int64[R]: the row's number in the caller's table
    key_broker: np.ndarray  # int64[K]: broker number of each log dir


@dataclass
class Out:
    """Per snapshot of a chunk: the summary (steps 1-3) and the decision (step 4)."""

    active_brokers: np.ndarray
    active_log_dirs: np.ndarray
    violations: np.ndarray
    policy_factor: np.ndarray
    complete: np.ndarray
    min_ratio: np.ndarray         # NaN: none in force
    worst: np.ndarray             # log dir number or NONE
    worst_available: np.ndarray   # NONE when offline
    worst_ratio: np.ndarray       # NaN when offline
    missing_at: np.ndarray        # int64[S+1] offsets into missing
    missing: np.ndarray           # broker numbers
    closest: np.ndarray           # int64[S, N]: log dir numbers, nearest first, NONE after the last
    c_available: np.ndarray       # int64[S, N] (NONE when offline)
    c_total: np.ndarray
    c_ratio: np.ndarray           # float64[S, N] NaN when offline
    c_headroom: np.ndarray
    c_fill: np.ndarray
    c_eta: np.ndarray
    c_row: np.ndarray             # int64[S, N]: row of the reading (top partitions), NONE when offline
    factor: np.ndarray
    source: np.ndarray            # int8: OBSERVATION, RETAINED, FALLBACK
    valid_from: np.ndarray        # int64 µs
    throttled_since: np.ndarray   # int64 µs, NONE
    cached: np.ndarray            # log dirs in the cache after the snapshot (in force or pinned)
    evicted: np.ndarray           # log dirs whose reading expired at the snapshot
    pred_key: np.ndarray          # the log dir of a predictive throttle (SnapshotSummary.predictive), NONE if none
    pred_eta: np.ndarray          # its ETA in seconds, NaN if none
    # What a stop refuses (cache.stop_topics): per snapshot decided 0 on an observation or retained, the violating
    # entries in force, every one of them (not only the closest); none for other snapshots.
    stop_at: np.ndarray = None    # int64[S+1] offsets into stop_key and stop_row
    stop_key: np.ndarray = None   # log dir numbers
    stop_row: np.ndarray = None   # the row of each one's reading (its topics), NONE when it has none


def run(state: State, chunk: SnapshotColumns, params: Params) -> Out:
    """Advance `state` (in place) over `chunk`; what each snapshot decided."""
    s = len(chunk.t)
    n = params.closest
    expected = len(chunk.brokers) + len(chunk.fenced)
    out = Out(
        np.zeros(s, np.int64), np.zeros(s, np.int64), np.zeros(s, np.int64), np.ones(s), np.zeros(s, bool),
        np.full(s, np.nan), np.full(s, NONE, np.int64), np.full(s, NONE, np.int64), np.full(s, np.nan),
        np.zeros(s + 1, np.int64), np.zeros(expected, np.int64),
        np.full((s, n), NONE, np.int64), np.full((s, n), NONE, np.int64), np.full((s, n), NONE, np.int64),
        np.full((s, n), np.nan), np.full((s, n), np.nan), np.full((s, n), np.nan), np.full((s, n), np.nan),
        np.full((s, n), NONE, np.int64),
        np.zeros(s), np.zeros(s, np.int8), np.zeros(s, np.int64), np.full(s, NONE, np.int64),
        np.zeros(s, np.int64), np.zeros(s, np.int64), np.full(s, NONE, np.int64), np.full(s, np.nan),
        np.zeros(s + 1, np.int64))
    out.stop_key, out.stop_row = _run(state.has, state.pinned, state.observed, state.total, state.available, state.offline, state.fill, state.row,
         state.hist_t, state.hist_a, state.hist_n, state.registered, state.decision,
         (state.env_t, state.env_a, state.env_n, state.eta, state.env_m),
         chunk.t, chunk.ok, chunk.brokers_at, chunk.brokers, chunk.fenced_at, chunk.fenced, chunk.rows_at,
         chunk.key, chunk.total, chunk.available, chunk.offline, chunk.row, chunk.key_broker,
         *params.tuple(),
         out.active_brokers, out.active_log_dirs, out.violations, out.policy_factor, out.complete, out.min_ratio,
         out.worst, out.worst_available, out.worst_ratio, out.missing_at, out.missing, out.closest, out.c_available,
         out.c_total, out.c_ratio, out.c_headroom, out.c_fill, out.c_eta, out.c_row,
         out.factor, out.source, out.valid_from, out.throttled_since, out.cached, out.evicted, out.pred_key,
         out.pred_eta, out.stop_at)
    out.missing = out.missing[:out.missing_at[-1]]
    return out


@numba.njit(cache=True, nogil=True)  # the next chunk is read meanwhile (replay/cluster_files.py)
def _run(has, pinned, observed, total, available, offline, fill, row, hist_t, hist_a, hist_n, registered, decision,
         env, t, ok, brokers_at, brokers, fenced_at, fenced, rows_at, key, r_total, r_available, r_offline, r_row,
         key_broker,
         validity_us, hard_kind, hard_value, soft_kind, soft_value, fallback, offline_policy, fenced_pin, closest,
         eta_horizon_s, bucket_us, o_active_brokers, o_active_log_dirs, o_violations, o_policy_factor, o_complete, o_min_ratio, o_worst,
         o_worst_available, o_worst_ratio, o_missing_at, o_missing, o_closest, o_c_available, o_c_total, o_c_ratio,
         o_c_headroom, o_c_fill, o_c_eta, o_c_row, o_factor, o_source, o_valid_from, o_since, o_cached, o_evicted,
         o_pred_key, o_pred_eta, o_stop_at):
    nb = registered.shape[0]
    listed = np.zeros(nb, np.bool_)     # brokers of this snapshot
    fenced_now = np.zeros(nb, np.bool_)
    present = np.zeros(nb, np.bool_)    # brokers with a log dir in force
    answered = np.zeros(nb, np.bool_)   # brokers with a volume in this snapshot
    gone = np.zeros(has.shape[0], np.bool_)  # expired at this snapshot
    # The closest volumes' outputs as one argument (numba inlines a call of at most 30 arguments).
    c_out = (o_closest, o_c_available, o_c_total, o_c_ratio, o_c_headroom, o_c_fill, o_c_eta, o_c_row)
    n_missing = 0
    n_stop = 0
    stop_key = np.empty(16, np.int64)
    stop_row = np.empty(16, np.int64)
    for i in range(t.shape[0]):
        now = t[i]
        steps.evict_expired(now, validity_us, has, pinned, observed, gone)
        steps.mark(listed, brokers_at, brokers, i)
        steps.mark(fenced_now, fenced_at, fenced, i)
        # An observation: a SUCCESS, or a partial view (a failed poll with the volumes of the brokers that answered).
        seen = steps.mark_answered(answered, rows_at, key, key_broker, i) or ok[i]
        if seen:
            steps.upsert_snapshot(i, now, listed, fenced_now, rows_at, key, r_total, r_available, r_offline, r_row,
                             key_broker, validity_us, hard_kind, hard_value, offline_policy, fenced_pin, has, pinned,
                             observed, total, available, offline, fill, row, hist_t, hist_a, hist_n, registered,
                             env, bucket_us if eta_horizon_s > 0.0 else 0)
        violations, policy_factor = steps.entries_in_force(
            i, has, pinned, registered, key_broker, offline, available, total, hard_kind, hard_value, soft_kind,
            soft_value, present, o_active_log_dirs, o_violations, o_policy_factor, o_min_ratio, o_worst,
            o_worst_available, o_worst_ratio, env[3], eta_horizon_s, o_pred_key, o_pred_eta)
        if closest > 0:
            steps.closest_volumes(i, closest, has, pinned, registered, key_broker, offline, available, total, fill, row,
                             hard_kind, hard_value, c_out)
        n_missing = steps.missing_brokers(i, ok[i], seen, listed, fenced_now, present, answered, n_missing, o_missing_at,
                                     o_missing)
        complete = ok[i] and n_missing == o_missing_at[i]
        o_active_brokers[i] = listed.sum()
        o_complete[i] = complete
        factor, source, valid_from, since = steps.advance(decision, now, seen and (violations > 0 or complete),
                                                     policy_factor, validity_us, fallback)
        o_factor[i] = factor
        o_source[i] = source
        o_valid_from[i] = valid_from
        o_since[i] = since
        o_stop_at[i] = n_stop
        if factor <= 0.0 and source != FALLBACK:
            n_stop, stop_key, stop_row = steps.stopped_by(has, pinned, registered, key_broker, offline, available, total,
                                                     row, hard_kind, hard_value, n_stop, stop_key, stop_row)
        cached, evicted = steps.cache_counts(has, gone)
        o_cached[i] = cached
        o_evicted[i] = evicted
    o_missing_at[t.shape[0]] = n_missing
    o_stop_at[t.shape[0]] = n_stop
    return stop_key[:n_stop].copy(), stop_row[:n_stop].copy()
