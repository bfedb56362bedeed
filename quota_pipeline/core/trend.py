"""How fast a log dir fills: the least-squares slope of its recent readings, and the time left to the hard limit.

Written once for both formulations: `fill_rate` on Python numbers (the streaming cache) mirrors
core/kernel.py's compiled loop term by term, so the two agree to the last bits of a double.
"""
from __future__ import annotations

import datetime as dt
from typing import Sequence

# The readings a fill rate is fitted over: the last few of the log dir, none older than the validity (an older
# reading would no longer be in the cache either). Three readings already give a usable slope.
FILL_READINGS = 5


def recent(history: Sequence[tuple[int, int]], t_us: int, validity: dt.timedelta) -> list[tuple[int, int]]:
    """The (observed_at in µs, available bytes) readings a fill rate at `t_us` is fitted over, oldest first."""
    horizon = t_us - (validity.days * 86_400_000_000 + validity.seconds * 1_000_000 + validity.microseconds)
    return [h for h in history[-FILL_READINGS:] if h[0] >= horizon]


def fill_rate(readings: Sequence[tuple[int, int]]) -> float | None:
    """Bytes/s the log dir loses, fitted over `readings` (µs, available); None unless it is filling."""
    n = len(readings)
    if n < 2:
        return None
    last = readings[-1][0]
    ts = [(t - last) / 1e6 for t, _ in readings]  # seconds before the newest reading: small, exact-ish doubles
    mean_t = sum(ts) / n
    mean_a = sum(float(a) for _, a in readings) / n
    var = sum((t - mean_t) * (t - mean_t) for t in ts)
    if var == 0.0:
        return None
    cov = sum((t - mean_t) * (float(a) - mean_a) for t, (_, a) in zip(ts, readings))
    rate = -cov / var
    return rate if rate > 0.0 else None


def onset_rate(readings: Sequence[tuple[int, int]]) -> float | None:
    """Bytes/s lost between the last two of `readings` (µs, available); None unless filling. A fill that has just
    begun shows in this step before a least-squares slope over several flat readings catches up with it."""
    if len(readings) < 2:
        return None
    (t0, a0), (t1, a1) = readings[-2], readings[-1]
    if t1 <= t0:
        return None
    rate = (float(a0) - float(a1)) / ((t1 - t0) / 1e6)
    return rate if rate > 0.0 else None


def eta_seconds(headroom_bytes: float | None, rate: float | None) -> float | None:
    """Seconds until the hard limit at `rate`; 0 once at or past it; None when not filling or offline."""
    if headroom_bytes is None or rate is None:
        return None
    return 0.0 if headroom_bytes <= 0 else headroom_bytes / rate
