"""Steps 1-4 of the decision semantics as numba functions over one cluster's slot arrays (a slot per log dir), each
named for the step it is; core/compiled/kernel.py's loop inlines them snapshot by snapshot. Each is held to its
reference in core/reference/cache.py and core/reference/decision.py."""
from __future__ import annotations

import numba
import numpy as np

from quota_pipeline.core.compiled import arithmetic, numba_cache
from quota_pipeline.core.compiled.codes import (FALLBACK, FENCED_PIN, LAST_KNOWN, NO_LIMIT, NONE, OBSERVATION, PIN,
                                                RETAINED)

numba_cache.install()  # before the functions below are compiled


@numba.njit(cache=True, inline="always")
def evict_expired(now, validity_us, has, pinned, observed, gone):
    """Step 1, eviction: unpinned readings at or past their validity leave the cache; `gone` marks them."""
    for k in range(has.shape[0]):
        gone[k] = has[k] and not pinned[k] and not (now < observed[k] + validity_us)
        if gone[k]:
            has[k] = False


@numba.njit(cache=True, inline="always")
def mark(flags, at, numbers, i):
    """flags[b] set for the broker numbers of snapshot i in one of the chunk's broker lists, the rest cleared."""
    flags[:] = False
    for j in range(at[i], at[i + 1]):
        flags[numbers[j]] = True


@numba.njit(cache=True, inline="always")
def mark_answered(answered, rows_at, key, key_broker, i):
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
    if offline_policy == LAST_KNOWN:
        return
    if offline_policy == PIN and has[k]:
        rate = fill[k] if np.isnan(onset) or (not np.isnan(fill[k]) and fill[k] >= onset) else onset
        if not offline[k] and arithmetic.reached(available[k], total[k], rate, now - observed[k], hard_kind, hard_value):
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
    pinned[k] = 1 if offline_policy == PIN else 0
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
def upsert_snapshot(i, now, listed, fenced_now, rows_at, key, r_total, r_available, r_offline, r_row, key_broker,
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
        fill[k] = arithmetic.fill_rate(hist_t[k], hist_a[k], lo, m)
        row[k] = r_row[r]
        eta[k] = arithmetic.envelope_eta(k, now, r_available[r], r_total[r], bucket_us, hard_kind, hard_value, env_t, env_a,
                           env_n, env_m) if bucket_us > 0 else np.nan
    if fenced_pin:
        _pin_fenced(listed, fenced_now, key_broker, has, pinned)


@numba.njit(cache=True)
def _in_force(has, pinned, registered):
    """Step 2: an entry is in force when cached, unpinned or of a registered broker."""
    return has and (not pinned or registered)


@numba.njit(cache=True, inline="always")
def closest_volumes(i, closest, has, pinned, registered, key_broker, offline, available, total, fill, row,
                     hard_kind, hard_value, c_out):
    """Step 2, closest volumes: snapshot i's `closest` entries in force nearest the hard limit (offline first, then
    least headroom, then log dir number), by insertion, and their seconds to the limit at their fill rate."""
    o_closest, o_c_available, o_c_total, o_c_ratio, o_c_headroom, o_c_fill, o_c_eta, o_c_row = c_out
    filled = 0
    for k in range(has.shape[0]):
        if not _in_force(has[k], pinned[k], registered[key_broker[k]]):
            continue
        off = offline[k]
        head = 0.0 if off else available[k] - arithmetic.limit_bytes(hard_kind, hard_value, total[k])
        if filled < closest:
            pos = filled
            filled += 1
        elif arithmetic.closer(off, head, k, o_c_available[i, closest - 1] == NONE, o_c_headroom[i, closest - 1],
                     o_closest[i, closest - 1]):
            pos = closest - 1
        else:
            continue
        while pos > 0 and arithmetic.closer(off, head, k, o_c_available[i, pos - 1] == NONE, o_c_headroom[i, pos - 1],
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
        o_c_ratio[i, pos] = np.nan if off else arithmetic.ratio(available[k], total[k])
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
def entries_in_force(i, has, pinned, registered, key_broker, offline, available, total, hard_kind, hard_value,
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
        f, violating = arithmetic.volume_factor(off, available[k], total[k], hard_kind, hard_value, soft_kind, soft_value)
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
            ratio = arithmetic.ratio(available[k], total[k])
            if np.isnan(min_ratio) or ratio < min_ratio:
                min_ratio = ratio
        if worst == NONE or arithmetic.worse(f, off, ratio, available[k], k, wf, w_off, w_ratio, w_avail, worst):
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
def missing_brokers(i, ok, seen, listed, fenced_now, present, answered, n_missing, o_missing_at, o_missing):
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
def advance(decision, now, observed, policy_factor, validity_us, fallback):
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
def stopped_by(has, pinned, registered, key_broker, offline, available, total, row, hard_kind, hard_value,
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
        if arithmetic.volume_factor(offline[k], available[k], total[k], hard_kind, hard_value, NO_LIMIT, 0.0)[1]:
            stop_key[n_stop] = k
            stop_row[n_stop] = row[k]
            n_stop += 1
    return n_stop, stop_key, stop_row


@numba.njit(cache=True, inline="always")
def cache_counts(has, gone):
    """(cached, evicted): log dirs in the cache after the snapshot, and those that expired at it and were not read
    again (as the reference counts keys that left)."""
    cached = 0
    evicted = 0
    for k in range(has.shape[0]):
        if has[k]:
            cached += 1
        elif gone[k]:
            evicted += 1
    return cached, evicted
