"""Steps 1-4 of the decision semantics over columns: one cluster's snapshots in time order, compiled by numba.

Replay's formulation. core/cache.py and core/decision.py are the streaming form and the reference: this is the
same sequence of steps with the float operations in the same order, so the two agree to the last bit
(tests/test_equivalence.py). One call advances a cluster by a chunk of snapshots; the cache is a set of arrays
(one slot per log dir) carried from chunk to chunk, so memory is bounded by the chunk and the number of log
dirs, never by the length of the journal. Log dirs are numbered in (broker_id, log_dir) order, which is the
last tie-break of "worst" and "closest", so comparing numbers compares keys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from quota_pipeline.core import compiled_cache
from quota_pipeline.core.config import Limit
from quota_pipeline.core.model import DecisionSource, micros
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.trend import ETA_BUCKETS, ETA_MIN_BUCKETS, FILL_READINGS, UNKNOWN_TOP, bucket_micros

OFFLINE_POLICIES = ("violate", "pin", "last-known")
SOURCES = (DecisionSource.OBSERVATION.value, DecisionSource.RETAINED.value, DecisionSource.FALLBACK.value)
OBSERVATION, RETAINED, FALLBACK = 0, 1, 2
NO_LIMIT, BYTES, RATIO = 0, 1, 2
NONE = -1  # no time, no snapshot row, no log dir
FENCED_PIN = 2  # State.pinned: pinned because its broker was fenced (cache.Entry.fenced_pin)
compiled_cache.install()  # before the functions below are compiled


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
                   OFFLINE_POLICIES.index(s.offline_policy), s.fenced_policy == "pin", s.closest_volumes,
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
    # The predictive step (cache.Entry.eta_seconds, CacheState.buckets); untouched while it is off.
    eta: np.ndarray = None    # float64[K]: the cached reading's ETA by the envelope (s), NaN when none
    env_t: np.ndarray = None  # int64[K, ETA_BUCKETS]: each bucket's least reading, oldest first
    env_a: np.ndarray = None  # int64[K, ETA_BUCKETS]
    env_n: np.ndarray = None  # int64[K]
    env_m: np.ndarray = None  # int64[K, ETA_BUCKETS]: each bucket's most available bytes (UNKNOWN_TOP: not known)

    def __post_init__(self) -> None:
        # A state saved before the predictive step (a checkpoint) has none of it: no rate, no buckets.
        keys = self.has.shape[0]
        if self.eta is None:
            self.eta = np.full(keys, np.nan)
        if self.env_t is None:
            self.env_t = np.zeros((keys, ETA_BUCKETS), np.int64)
            self.env_a = np.zeros((keys, ETA_BUCKETS), np.int64)
            self.env_n = np.zeros(keys, np.int64)
        if self.env_m is None:
            # Saved before tops were kept: the buckets it has are of unknown top, which never passes for a clean-up.
            self.env_m = np.full((keys, ETA_BUCKETS), UNKNOWN_TOP, np.int64)

    @classmethod
    def empty(cls, keys: int, brokers: int) -> "State":
        return cls(np.zeros(keys, bool), np.zeros(keys, np.int8), np.zeros(keys, np.int64), np.zeros(keys, np.int64),
                   np.zeros(keys, np.int64), np.zeros(keys, bool), np.full(keys, np.nan), np.full(keys, NONE, np.int64),
                   np.zeros((keys, FILL_READINGS), np.int64), np.zeros((keys, FILL_READINGS), np.int64),
                   np.zeros(keys, np.int64), np.zeros(brokers, bool), np.array([0.0, 1.0, 0.0, 0.0, NONE]))

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
class Chunk:
    """Snapshots of one cluster in time order (unique times) with their volume rows grouped by snapshot."""

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


@numba.njit(cache=True, nogil=True)
def filled(key: np.ndarray, total: np.ndarray, available: np.ndarray, offline: np.ndarray, rows_at: np.ndarray,
           last: np.ndarray) -> np.ndarray:
    """Per snapshot, the bytes its log dirs grew by since their previous readings (replay's deferred bytes): the
    readings of snapshot i are rows rows_at[i] .. rows_at[i + 1], in time order, each of log dir key[r] with
    total[r] - available[r] bytes used unless offline[r]; `last` (per log dir, NaN: none yet) is updated in place.
    Whole bytes as doubles: the sums are exact in any order."""
    out = np.zeros(len(rows_at) - 1)
    for i in range(len(rows_at) - 1):
        for r in range(rows_at[i], rows_at[i + 1]):
            if offline[r]:
                continue
            used = float(total[r] - available[r])
            before = last[key[r]]
            if not np.isnan(before) and used > before:
                out[i] += used - before
            last[key[r]] = used
    return out


@numba.njit(cache=True, nogil=True)
def least_headroom(total: np.ndarray, available: np.ndarray, offline: np.ndarray, rows_at: np.ndarray,
                   hard_kind: int, hard_value: float) -> np.ndarray:
    """Per snapshot, the least bytes any log dir it read had above the hard limit (negative: past it), NaN when it
    read none online: snapshot i's readings are rows rows_at[i] .. rows_at[i + 1]."""
    out = np.full(len(rows_at) - 1, np.nan)
    for i in range(len(rows_at) - 1):
        for r in range(rows_at[i], rows_at[i + 1]):
            if offline[r]:
                continue
            head = float(available[r]) - (hard_value if hard_kind == BYTES else float(total[r]) * hard_value)
            if np.isnan(out[i]) or head < out[i]:
                out[i] = head
    return out


def run(state: State, chunk: Chunk, params: Params) -> Out:
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


@numba.njit(cache=True)
def _fill_rate(ts_us, av, lo, n):
    """trend.fill_rate over ts_us[lo:n], av[lo:n], term by term in the same order; NaN for None."""
    count = n - lo
    if count < 2:
        return np.nan
    last = ts_us[n - 1]
    mean_t = 0.0
    for j in range(lo, n):
        mean_t += (ts_us[j] - last) / 1e6
    mean_t = mean_t / count
    mean_a = 0.0
    for j in range(lo, n):
        mean_a += float(av[j])
    mean_a = mean_a / count
    var = 0.0
    for j in range(lo, n):
        d = (ts_us[j] - last) / 1e6 - mean_t
        var += d * d
    if var == 0.0:
        return np.nan
    cov = 0.0
    for j in range(lo, n):
        cov += ((ts_us[j] - last) / 1e6 - mean_t) * (float(av[j]) - mean_a)
    rate = -cov / var
    return rate if rate > 0.0 else np.nan


@numba.njit(cache=True)
def _limit_bytes(kind, value, total):
    return value if kind == BYTES else total * value


@numba.njit(cache=True)
def _ratio(available, total):
    return 0.0 if total == 0 else available / total


@numba.njit(cache=True)
def _factor(offline, available, total, hard_kind, hard_value, soft_kind, soft_value):
    """(volume factor, violates): policy.volume_factor and policy.violates, in the same order of operations."""
    if offline:
        return 0.0, True
    if hard_kind == BYTES:
        violating = available <= hard_value
    else:
        violating = _ratio(available, total) <= hard_value
    if violating:
        return 0.0, True
    if soft_kind == NO_LIMIT:
        return 1.0, False
    hard_b = _limit_bytes(hard_kind, hard_value, total)
    soft_b = _limit_bytes(soft_kind, soft_value, total)
    if available > soft_b:
        return 1.0, False
    return min(1.0, max(0.0, (available - hard_b) / (soft_b - hard_b))), False


@numba.njit(cache=True)
def _reached(available, total, rate, elapsed_us, hard_kind, hard_value):
    """cache.reached_by: the reading extrapolated at its fill rate (NaN: not filling) is at the hard limit."""
    if np.isnan(rate):
        return False
    estimate = available - rate * (elapsed_us / 1e6)
    if hard_kind == BYTES:
        return estimate <= hard_value
    return _ratio(estimate, total) <= hard_value


@numba.njit(cache=True, inline="always")
def _envelope(k, now, avail, total, bucket_us, hard_kind, hard_value, env_t, env_a, env_n, env_m):
    """trend.add_reading, then trend.envelope_eta (NaN for None), for log dir k's buckets."""
    b = now // bucket_us
    first = b - ETA_BUCKETS + 1
    n = env_n[k]
    lo = 0
    while lo < n and env_t[k, lo] // bucket_us < first:
        lo += 1
    for j in range(lo, n):
        env_t[k, j - lo] = env_t[k, j]
        env_a[k, j - lo] = env_a[k, j]
        env_m[k, j - lo] = env_m[k, j]
    n -= lo
    if n > 0:  # trend.cleaned_up: more available than every reading of the window restarts the history
        top = env_m[k, 0]
        for j in range(1, n):
            if env_m[k, j] > top:
                top = env_m[k, j]
        if avail > top:
            n = 0
    if n > 0 and env_t[k, n - 1] // bucket_us == b:
        if avail < env_a[k, n - 1]:
            env_t[k, n - 1] = now
            env_a[k, n - 1] = avail
        if avail > env_m[k, n - 1]:
            env_m[k, n - 1] = avail
    else:
        if n == ETA_BUCKETS:  # only after the window changed (trend.add_reading): the oldest goes
            for j in range(n - 1):
                env_t[k, j] = env_t[k, j + 1]
                env_a[k, j] = env_a[k, j + 1]
                env_m[k, j] = env_m[k, j + 1]
            n -= 1
        env_t[k, n] = now
        env_a[k, n] = avail
        env_m[k, n] = avail
        n += 1
    env_n[k] = n
    if n < ETA_MIN_BUCKETS:
        return np.nan
    rate = _fill_rate(env_t[k], env_a[k], 0, n)
    if np.isnan(rate):
        return np.nan
    least = env_a[k, 0]
    for j in range(1, n):
        if env_a[k, j] < least:
            least = env_a[k, j]
    headroom = least - _limit_bytes(hard_kind, hard_value, total)
    return 0.0 if headroom <= 0 else headroom / rate


@numba.njit(cache=True)
def _worse(f1, off1, r1, a1, k1, f2, off2, r2, a2, k2):
    """cache.worst_key(1) < worst_key(2): factor, offline first, ratio, bytes, then key number."""
    if f1 != f2:
        return f1 < f2
    if off1 != off2:
        return off1
    if not off1:
        if r1 != r2:
            return r1 < r2
        if a1 != a2:
            return a1 < a2
    return k1 < k2


@numba.njit(cache=True)
def _closer(off1, h1, k1, off2, h2, k2):
    """cache.closest_key(1) < closest_key(2): offline first, then least headroom, then key number."""
    if off1 != off2:
        return off1
    if not off1 and h1 != h2:
        return h1 < h2
    return k1 < k2


@numba.njit(cache=True, inline="always")
def _evict_expired(now, validity_us, has, pinned, observed, gone):
    """Step 1, eviction: unpinned readings at or past their validity leave the cache; `gone` marks them."""
    for k in range(has.shape[0]):
        gone[k] = has[k] and not pinned[k] and not (now < observed[k] + validity_us)
        if gone[k]:
            has[k] = False


@numba.njit(cache=True, inline="always")
def _mark(flags, at, numbers, i):
    """flags[b] set for the broker numbers of snapshot i in one of the chunk's broker lists, the rest cleared."""
    flags[:] = False
    for j in range(at[i], at[i + 1]):
        flags[numbers[j]] = True


@numba.njit(cache=True, inline="always")
def _mark_answered(answered, rows_at, key, key_broker, i):
    """answered[b] set for the brokers with a volume in snapshot i (they answered its DescribeLogDirs), the rest
    cleared; whether it has any volume."""
    answered[:] = False
    for r in range(rows_at[i], rows_at[i + 1]):
        answered[key_broker[key[r]]] = True
    return rows_at[i + 1] > rows_at[i]


@numba.njit(cache=True, inline="always")
def _onset(k, validity_us, hist_t, hist_a, hist_n):
    """cache.onset: the key's last step of filling, the one before its newest reading within validity of it; NaN
    when not filling. Called for a cached reading, which is the newest: its step, however long ago it was read."""
    n = hist_n[k]
    if n < 2 or hist_t[k, n - 2] < hist_t[k, n - 1] - validity_us:
        return np.nan
    if hist_t[k, n - 1] <= hist_t[k, n - 2]:
        return np.nan
    rate = (float(hist_a[k, n - 2]) - float(hist_a[k, n - 1])) / ((hist_t[k, n - 1] - hist_t[k, n - 2]) / 1e6)
    return rate if rate > 0.0 else np.nan


@numba.njit(cache=True, inline="always")
def _report_offline(k, now, offline_policy, hard_kind, hard_value, has, pinned, observed, total, available, offline,
                    fill, row, onset):
    """Step 1, an offline report as the offline policy says: violate caches a violating entry, pin pins the cached
    reading (or adds a pinned violating entry), last-known leaves the cache as it is."""
    if offline_policy == 2:
        return
    if offline_policy == 1 and has[k]:
        rate = fill[k] if np.isnan(onset) or (not np.isnan(fill[k]) and fill[k] >= onset) else onset
        if not offline[k] and _reached(available[k], total[k], rate, now - observed[k], hard_kind, hard_value):
            # Filled up to the hard limit by now at its last fill rate: pinned offline, keeping that rate
            # and the reading's row (its top partitions) for the record (cache.went_offline_filling).
            total[k] = NONE
            available[k] = NONE
            offline[k] = True
            pinned[k] = 1
            return
        if pinned[k] != FENCED_PIN:  # a reading from before the broker's fence counts as none (below)
            pinned[k] = 1
            return
    # violate, or pin without a reading of the broker's current run: a violating entry
    has[k] = True
    pinned[k] = 1 if offline_policy == 1 else 0
    observed[k] = now
    total[k] = NONE
    available[k] = NONE
    offline[k] = True
    fill[k] = np.nan
    row[k] = NONE


@numba.njit(cache=True, inline="always")
def _pin_fenced(listed, fenced_now, key_broker, has, pinned):
    """Step 1, fenced policy pin: a fenced broker takes no writes, its last readings are its current state."""
    for k in range(has.shape[0]):
        b = key_broker[k]
        if has[k] and fenced_now[b] and not listed[b] and pinned[k] == 0:
            pinned[k] = FENCED_PIN


@numba.njit(cache=True, inline="always")
def _upsert_snapshot(i, now, listed, fenced_now, rows_at, key, r_total, r_available, r_offline, r_row, key_broker,
                     validity_us, hard_kind, hard_value, offline_policy, fenced_pin, has, pinned, observed, total,
                     available, offline, fill, row, hist_t, hist_a, hist_n, registered, env, bucket_us):
    """Step 1 for an observation (a SUCCESS or a partial view): its registered brokers; each reading into its log
    dir's fill history (the oldest dropped) and cached unpinned with its fill rate over the history within validity
    (and, with `bucket_us` > 0, into its ETA-window buckets, with its envelope rate); its offline reports; the
    fenced brokers' pins. (The per-row step is written out here: a call per row, even inlined, costs more.)"""
    env_t, env_a, env_n, eta, env_m = env
    for b in range(registered.shape[0]):
        registered[b] = listed[b] or fenced_now[b]
    depth = hist_t.shape[1]
    for r in range(rows_at[i], rows_at[i + 1]):
        k = key[r]
        if r_offline[r]:
            _report_offline(k, now, offline_policy, hard_kind, hard_value, has, pinned, observed, total, available,
                            offline, fill, row, _onset(k, validity_us, hist_t, hist_a, hist_n))
            continue
        m = hist_n[k]
        if m == depth:
            for j in range(depth - 1):
                hist_t[k, j] = hist_t[k, j + 1]
                hist_a[k, j] = hist_a[k, j + 1]
            m -= 1
        hist_t[k, m] = now
        hist_a[k, m] = r_available[r]
        m += 1
        hist_n[k] = m
        lo = 0
        while lo < m and hist_t[k, lo] < now - validity_us:
            lo += 1
        has[k] = True
        pinned[k] = 0
        observed[k] = now
        total[k] = r_total[r]
        available[k] = r_available[r]
        offline[k] = False
        fill[k] = _fill_rate(hist_t[k], hist_a[k], lo, m)
        row[k] = r_row[r]
        eta[k] = _envelope(k, now, r_available[r], r_total[r], bucket_us, hard_kind, hard_value, env_t, env_a,
                           env_n, env_m) if bucket_us > 0 else np.nan
    if fenced_pin:
        _pin_fenced(listed, fenced_now, key_broker, has, pinned)


@numba.njit(cache=True)
def _in_force(has, pinned, registered):
    """Step 2: an entry is in force when cached, unpinned or of a registered broker."""
    return has and (not pinned or registered)


@numba.njit(cache=True, inline="always")
def _closest_volumes(i, closest, has, pinned, registered, key_broker, offline, available, total, fill, row,
                     hard_kind, hard_value, c_out):
    """Step 2, closest volumes: snapshot i's `closest` entries in force nearest the hard limit (offline first, then
    least headroom, then log dir number), by insertion, and their seconds to the limit at their fill rate."""
    o_closest, o_c_available, o_c_total, o_c_ratio, o_c_headroom, o_c_fill, o_c_eta, o_c_row = c_out
    filled = 0
    for k in range(has.shape[0]):
        if not _in_force(has[k], pinned[k], registered[key_broker[k]]):
            continue
        off = offline[k]
        head = 0.0 if off else available[k] - _limit_bytes(hard_kind, hard_value, total[k])
        if filled < closest:
            pos = filled
            filled += 1
        elif _closer(off, head, k, o_c_available[i, closest - 1] == NONE, o_c_headroom[i, closest - 1],
                     o_closest[i, closest - 1]):
            pos = closest - 1
        else:
            continue
        while pos > 0 and _closer(off, head, k, o_c_available[i, pos - 1] == NONE, o_c_headroom[i, pos - 1],
                                  o_closest[i, pos - 1]):
            o_closest[i, pos] = o_closest[i, pos - 1]
            o_c_available[i, pos] = o_c_available[i, pos - 1]
            o_c_total[i, pos] = o_c_total[i, pos - 1]
            o_c_ratio[i, pos] = o_c_ratio[i, pos - 1]
            o_c_headroom[i, pos] = o_c_headroom[i, pos - 1]
            o_c_fill[i, pos] = o_c_fill[i, pos - 1]
            o_c_row[i, pos] = o_c_row[i, pos - 1]
            pos -= 1
        o_closest[i, pos] = k
        o_c_available[i, pos] = NONE if off else available[k]
        o_c_total[i, pos] = NONE if off else total[k]
        o_c_ratio[i, pos] = np.nan if off else _ratio(available[k], total[k])
        o_c_headroom[i, pos] = np.nan if off else head
        o_c_fill[i, pos] = fill[k]
        o_c_row[i, pos] = row[k]
    for p in range(filled):
        h = o_c_headroom[i, p]
        rate = o_c_fill[i, p]
        if not np.isnan(rate):
            # NaN headroom with a rate: offline after filling up (cache.closest_volumes gives it 0).
            o_c_eta[i, p] = 0.0 if np.isnan(h) or h <= 0 else h / rate


@numba.njit(cache=True, inline="always")
def _entries_in_force(i, has, pinned, registered, key_broker, offline, available, total, hard_kind, hard_value,
                      soft_kind, soft_value, present, o_active_log_dirs, o_violations, o_policy_factor, o_min_ratio,
                      o_worst, o_worst_available, o_worst_ratio, eta, horizon_s, o_pred_key, o_pred_eta):
    """Step 2: the entries in force, their violations, the policy factor (the least of each one's volume factor
    and, with `horizon_s` > 0, its predictive factor), the least ratio, the worst log dir and the predictive
    throttle (cache.predictive_throttle); `present` marks their brokers. Returns (violations, policy factor)."""
    present[:] = False
    in_force = 0
    violations = 0
    policy_factor = 1.0
    min_ratio = np.nan
    worst = NONE
    wf = 0.0
    w_off = False
    w_ratio = 0.0
    w_avail = 0
    limits_factor = 1.0
    least_eta_factor = 1.0
    least_eta_key = NONE
    least_eta = np.nan
    for k in range(has.shape[0]):
        if not _in_force(has[k], pinned[k], registered[key_broker[k]]):
            continue
        in_force += 1
        present[key_broker[k]] = True
        off = offline[k]
        f, violating = _factor(off, available[k], total[k], hard_kind, hard_value, soft_kind, soft_value)
        if violating:
            violations += 1
        if f < limits_factor:
            limits_factor = f
        if horizon_s > 0.0 and not off and not np.isnan(eta[k]):
            ef = min(1.0, max(0.0, eta[k] / horizon_s))  # trend.eta_factor
            if ef < least_eta_factor:  # keys in (broker, log dir) order: the first of equal factors
                least_eta_factor, least_eta_key, least_eta = ef, k, eta[k]
            if ef < f:
                f = ef
        if f < policy_factor:
            policy_factor = f
        ratio = 0.0
        if not off:
            ratio = _ratio(available[k], total[k])
            if np.isnan(min_ratio) or ratio < min_ratio:
                min_ratio = ratio
        if worst == NONE or _worse(f, off, ratio, available[k], k, wf, w_off, w_ratio, w_avail, worst):
            worst, wf, w_off, w_ratio, w_avail = k, f, off, ratio, available[k]
    o_active_log_dirs[i] = in_force
    o_violations[i] = violations
    o_policy_factor[i] = policy_factor
    o_min_ratio[i] = min_ratio
    o_worst[i] = worst
    if worst != NONE:
        o_worst_available[i] = NONE if w_off else w_avail
        o_worst_ratio[i] = np.nan if w_off else w_ratio
    if least_eta_factor < 1.0 and least_eta_factor < limits_factor:
        o_pred_key[i] = least_eta_key
        o_pred_eta[i] = least_eta
    return violations, policy_factor


@numba.njit(cache=True, inline="always")
def _missing_brokers(i, ok, seen, listed, fenced_now, present, answered, n_missing, o_missing_at, o_missing):
    """Step 3, completeness (cache.missing_brokers): the brokers of an observation (listed or fenced) without an
    entry in force and, in a partial view (`seen` but not `ok`), the listed ones that did not answer, appended to
    o_missing from n_missing on; the new count (complete when it did not grow)."""
    o_missing_at[i] = n_missing
    if seen:
        for b in range(listed.shape[0]):
            if (listed[b] or fenced_now[b]) and (not present[b] or (not ok and listed[b] and not answered[b])):
                o_missing[n_missing] = b
                n_missing += 1
    return n_missing


@numba.njit(cache=True, inline="always")
def _advance(decision, now, observed, policy_factor, validity_us, fallback):
    """Step 4 (decision.advance): decide on an observation, retain within validity, or fall back; the decision in
    force is updated in place. Returns (factor, source, valid_from, throttled_since)."""
    if decision[0] == 0.0:
        decision[0] = 1.0
        decision[1] = 1.0
        decision[2] = OBSERVATION
        decision[3] = now
        decision[4] = NONE
    cur_factor = decision[1]
    cur_source = int(decision[2])
    cur_from = int(decision[3])
    cur_since = int(decision[4])
    if observed:
        factor, source, valid_from = policy_factor, OBSERVATION, now
    elif cur_source == FALLBACK or now > cur_from + validity_us:
        factor, source, valid_from = fallback, FALLBACK, cur_from
    else:
        factor, source, valid_from = cur_factor, RETAINED, cur_from
    if factor >= 1.0:
        since = NONE
    elif cur_factor < 1.0 and cur_since != NONE:
        since = cur_since
    else:
        since = now
    decision[1] = factor
    decision[2] = source
    decision[3] = valid_from
    decision[4] = since
    return factor, source, valid_from, since


@numba.njit(cache=True, inline="always")
def _stopped_by(has, pinned, registered, key_broker, offline, available, total, row, hard_kind, hard_value,
                n_stop, stop_key, stop_row):
    """The violating entries in force (keys and reading rows) appended from n_stop on, the arrays grown as needed:
    what a stop refuses (cache.stop_topics). Returns (count, keys, rows)."""
    keys = has.shape[0]
    if n_stop + keys > stop_key.shape[0]:
        size = max(2 * stop_key.shape[0], n_stop + keys)
        more_keys = np.empty(size, np.int64)
        more_rows = np.empty(size, np.int64)
        more_keys[:n_stop] = stop_key[:n_stop]
        more_rows[:n_stop] = stop_row[:n_stop]
        stop_key, stop_row = more_keys, more_rows
    for k in range(keys):
        if not _in_force(has[k], pinned[k], registered[key_broker[k]]):
            continue
        if _factor(offline[k], available[k], total[k], hard_kind, hard_value, NO_LIMIT, 0.0)[1]:
            stop_key[n_stop] = k
            stop_row[n_stop] = row[k]
            n_stop += 1
    return n_stop, stop_key, stop_row


@numba.njit(cache=True, inline="always")
def _cache_counts(has, gone):
    """(cached, evicted): log dirs in the cache after the snapshot, and those that expired at it and were not read
    again (the streaming form counts keys that left)."""
    cached = 0
    evicted = 0
    for k in range(has.shape[0]):
        if has[k]:
            cached += 1
        elif gone[k]:
            evicted += 1
    return cached, evicted


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
        _evict_expired(now, validity_us, has, pinned, observed, gone)
        _mark(listed, brokers_at, brokers, i)
        _mark(fenced_now, fenced_at, fenced, i)
        # An observation: a SUCCESS, or a partial view (a failed poll with the volumes of the brokers that answered).
        seen = _mark_answered(answered, rows_at, key, key_broker, i) or ok[i]
        if seen:
            _upsert_snapshot(i, now, listed, fenced_now, rows_at, key, r_total, r_available, r_offline, r_row,
                             key_broker, validity_us, hard_kind, hard_value, offline_policy, fenced_pin, has, pinned,
                             observed, total, available, offline, fill, row, hist_t, hist_a, hist_n, registered,
                             env, bucket_us if eta_horizon_s > 0.0 else 0)
        violations, policy_factor = _entries_in_force(
            i, has, pinned, registered, key_broker, offline, available, total, hard_kind, hard_value, soft_kind,
            soft_value, present, o_active_log_dirs, o_violations, o_policy_factor, o_min_ratio, o_worst,
            o_worst_available, o_worst_ratio, env[3], eta_horizon_s, o_pred_key, o_pred_eta)
        if closest > 0:
            _closest_volumes(i, closest, has, pinned, registered, key_broker, offline, available, total, fill, row,
                             hard_kind, hard_value, c_out)
        n_missing = _missing_brokers(i, ok[i], seen, listed, fenced_now, present, answered, n_missing, o_missing_at,
                                     o_missing)
        complete = ok[i] and n_missing == o_missing_at[i]
        o_active_brokers[i] = listed.sum()
        o_complete[i] = complete
        factor, source, valid_from, since = _advance(decision, now, seen and (violations > 0 or complete),
                                                     policy_factor, validity_us, fallback)
        o_factor[i] = factor
        o_source[i] = source
        o_valid_from[i] = valid_from
        o_since[i] = since
        o_stop_at[i] = n_stop
        if factor <= 0.0 and source != FALLBACK:
            n_stop, stop_key, stop_row = _stopped_by(has, pinned, registered, key_broker, offline, available, total,
                                                     row, hard_kind, hard_value, n_stop, stop_key, stop_row)
        cached, evicted = _cache_counts(has, gone)
        o_cached[i] = cached
        o_evicted[i] = evicted
    o_missing_at[t.shape[0]] = n_missing
    o_stop_at[t.shape[0]] = n_stop
    return stop_key[:n_stop].copy(), stop_row[:n_stop].copy()
