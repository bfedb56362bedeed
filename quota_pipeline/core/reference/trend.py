"""How fast a log dir fills: the least-squares slope of its recent readings, and the time left to the hard limit.

The reference: `fill_rate` on Python numbers (cache.py) is mirrored term by term by core/compiled/arithmetic.py, so
the two agree to the last bits of a double.
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


# The predictive policy's fill rate: Kafka frees space in steps (retention deletes whole segments every
# check interval, 5 min by default), so available bytes fall between deletions and jump back at each one, and a
# least-squares slope over a few readings reads every falling edge as a crisis. The lower envelope does not: the
# window is cut into ETA_BUCKETS buckets aligned to epoch multiples of their length (so replay and the streaming job
# cut alike), each keeps its least reading, and the slope is fitted over those minima. A bucket at least as long as
# the deletion period holds the bottom of a tooth, and the bottoms follow the real trend.
ETA_BUCKETS = 6
ETA_MIN_BUCKETS = 3  # fewer minima give no rate: two points fit any line


def bucket_micros(window: dt.timedelta) -> int:
    """The length of one envelope bucket in µs: a sixth of the window, in whole µs."""
    return max(1, (window.days * 86_400_000_000 + window.seconds * 1_000_000 + window.microseconds) // ETA_BUCKETS)


def in_window(buckets: Sequence[tuple[int, int, int]], t_us: int, bucket_us: int) -> tuple[tuple[int, int, int], ...]:
    """The (µs, least available bytes, most available bytes) buckets within the window at `t_us`: the bucket
    holding t_us and the ETA_BUCKETS - 1 before it."""
    first = t_us // bucket_us - ETA_BUCKETS + 1
    return tuple(b for b in buckets if b[0] // bucket_us >= first)


def cleaned_up(buckets: Sequence[tuple[int, int, int]], available: int) -> bool:
    """A clean-up (an operator deleting data, retention raised, a big compaction): a reading with more available
    bytes than every reading of the window, the largest top of `buckets` (within the window). While a disk fills,
    retention's passes lift it less each time (the sawtooth's tops fall), so a fill never passes for one."""
    return len(buckets) > 0 and available > max(b[2] for b in buckets)


def add_reading(buckets: Sequence[tuple[int, int, int]], t_us: int, available: int,
                bucket_us: int) -> tuple[tuple[int, int, int], ...]:
    """The key's buckets after a reading at `t_us` (readings come in time order): a clean-up (`cleaned_up`) drops
    the window's buckets, so the history restarts from this reading; else the reading lowers its bucket's minimum
    (an equal one keeps the earlier time) and raises its top, or opens a new bucket; buckets out of the window go.
    Each bucket is (time of its least reading, its least available bytes, its most available bytes)."""
    kept = in_window(buckets, t_us, bucket_us)
    if cleaned_up(kept, available):
        kept = ()
    if kept and kept[-1][0] // bucket_us == t_us // bucket_us:
        t, least, top = kept[-1]
        if available < least:
            t, least = t_us, available
        return kept[:-1] + ((t, least, available if available > top else top),)
    # At most ETA_BUCKETS: more only when the window changed since the older minima were kept (a restart).
    return (kept + ((t_us, available, available),))[-ETA_BUCKETS:]


def envelope_rate(buckets: Sequence[tuple[int, int, int]]) -> float | None:
    """Bytes/s the log dir loses by its lower envelope: fill_rate over the bucket minima (each at its own time);
    None with fewer than ETA_MIN_BUCKETS buckets or unless filling."""
    return fill_rate([(t, least) for t, least, _ in buckets]) if len(buckets) >= ETA_MIN_BUCKETS else None


def envelope_eta(buckets: Sequence[tuple[int, int, int]], hard_bytes: float) -> float | None:
    """Seconds until the envelope reaches the hard limit (`hard_bytes` for the reading's total): from the least of
    the minima (the bottom of the last tooth, or the reading itself while it falls below them) at the envelope
    rate; 0 once at or past it; None without a rate. A reading just after a retention pass, one tooth above the
    bottoms, would put the limit a tooth's worth of time further than the disk's next low point. (After a clean-up
    the buckets restart from it, so the least of them is never a bottom from before the space was freed.)"""
    rate = envelope_rate(buckets)
    if rate is None:
        return None
    headroom = min(least for _, least, _ in buckets) - hard_bytes
    return 0.0 if headroom <= 0 else headroom / rate


def eta_factor(eta: float, horizon_seconds: float) -> float:
    """The predictive factor: ETA / horizon clamped to 0..1 (core/compiled/steps.py's, operation for operation)."""
    return min(1.0, max(0.0, eta / horizon_seconds))
