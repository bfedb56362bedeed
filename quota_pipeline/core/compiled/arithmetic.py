"""The arithmetic of the compiled decision: limits, factors, fill rates and the envelope's ETA, as numba functions the
steps inline. Each follows its reference (core/reference/policy.py, core/reference/trend.py, core/reference/cache.py)
term by term, in the same order of operations, so the doubles agree to the last bit."""
from __future__ import annotations

import numba
import numpy as np

from quota_pipeline.core.compiled import numba_cache
from quota_pipeline.core.compiled.codes import BYTES, NO_LIMIT
from quota_pipeline.core.reference.trend import ETA_BUCKETS, ETA_MIN_BUCKETS

numba_cache.install()  # before the functions below are compiled


@numba.njit(cache=True)
def fill_rate(ts_us, av, lo, n):
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
def limit_bytes(kind, value, total):
    return value if kind == BYTES else total * value


@numba.njit(cache=True)
def ratio(available, total):
    return 0.0 if total == 0 else available / total


@numba.njit(cache=True)
def volume_factor(offline, available, total, hard_kind, hard_value, soft_kind, soft_value):
    """(volume factor, violates): policy.volume_factor and policy.violates, in the same order of operations."""
    if offline:
        return 0.0, True
    if hard_kind == BYTES:
        violating = available <= hard_value
    else:
        violating = ratio(available, total) <= hard_value
    if violating:
        return 0.0, True
    if soft_kind == NO_LIMIT:
        return 1.0, False
    hard_b = limit_bytes(hard_kind, hard_value, total)
    soft_b = limit_bytes(soft_kind, soft_value, total)
    if available > soft_b:
        return 1.0, False
    return min(1.0, max(0.0, (available - hard_b) / (soft_b - hard_b))), False


@numba.njit(cache=True)
def reached(available, total, rate, elapsed_us, hard_kind, hard_value):
    """cache.reached_by: the reading extrapolated at its fill rate (NaN: not filling) is at the hard limit."""
    if np.isnan(rate):
        return False
    estimate = available - rate * (elapsed_us / 1e6)
    if hard_kind == BYTES:
        return estimate <= hard_value
    return ratio(estimate, total) <= hard_value


@numba.njit(cache=True, inline="always")
def envelope_eta(k, now, avail, total, bucket_us, hard_kind, hard_value, env_t, env_a, env_n, env_m):
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
    rate = fill_rate(env_t[k], env_a[k], 0, n)
    if np.isnan(rate):
        return np.nan
    least = env_a[k, 0]
    for j in range(1, n):
        if env_a[k, j] < least:
            least = env_a[k, j]
    headroom = least - limit_bytes(hard_kind, hard_value, total)
    return 0.0 if headroom <= 0 else headroom / rate


@numba.njit(cache=True)
def worse(f1, off1, r1, a1, k1, f2, off2, r2, a2, k2):
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
def closer(off1, h1, k1, off2, h2, k2):
    """cache.closest_key(1) < closest_key(2): offline first, then least headroom, then key number."""
    if off1 != off2:
        return off1
    if not off1 and h1 != h2:
        return h1 < h2
    return k1 < k2
