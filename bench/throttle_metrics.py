"""What a producer's samples say about one throttle: rate before, during (from 10 s in), largest throttle time,
and how soon after the release it is back at half its former rate."""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

from harness.producers import Sample

DROP_AFTER_S = 10.0  # the goal: throughput down by more than 95 % within 10 s of the throttle
DROP_GOAL = 0.05
RECOVERY_GOAL_S = 15.0  # ... and back at >= 50 % within 15 s of the release
RECOVERY_SHARE = 0.5


@dataclass(frozen=True)
class Outcome:
    pre_rate: float  # bytes/s over the two quota windows (22 s) before the throttle
    during: float  # mean rate from 10 s into the throttle to the release, as a share of pre_rate
    worst_5s: float  # the highest 5-s mean rate in that interval, as a share of pre_rate
    max_throttle_ms: float  # the largest throttle time the producer reported from the throttle on
    recovery_s: float | None  # seconds from the release to the end of the first 1-s span at >= 50 % of pre_rate
    after_15s: float  # mean rate over the 15 s after the release, as a share of pre_rate
    failed: int  # sends that failed (Java: BufferExhaustedException after max.block.ms, or timeouts)

    @property
    def meets_goal(self) -> bool:
        return self.during < DROP_GOAL and self.recovery_s is not None and self.recovery_s <= RECOVERY_GOAL_S


def acked_at(samples: Sequence[Sample], t: float) -> int:
    """Bytes acknowledged by time t (the last sample at or before t)."""
    i = bisect.bisect_right([s.t for s in samples], t) - 1
    return samples[i].acked if i >= 0 else 0


def rate(samples: Sequence[Sample], start: float, end: float) -> float:
    return (acked_at(samples, end) - acked_at(samples, start)) / (end - start)


def _first_recovery(samples: Sequence[Sample], release: float, target: float, end: float) -> float | None:
    t = release + 1.0
    while t <= end:
        if rate(samples, t - 1.0, t) >= target:
            return t - release
        t += 0.25
    return None


def outcome(samples: Sequence[Sample], throttle: float, release: float, end: float, window_s: float = 11.0) -> Outcome:
    """Summarise samples of a run throttled at `throttle`, released at `release`, observed until `end`."""
    # Under a produce quota a fast producer alternates bursts and throttled spells with the window's period;
    # two whole windows average that out.
    pre = rate(samples, throttle - 2 * window_s, throttle)
    share = (lambda r: r / pre) if pre > 0 else (lambda r: float("nan"))
    start = throttle + DROP_AFTER_S
    worst = max((rate(samples, t, t + 5.0) for t in _steps(start, release - 5.0, 0.25)), default=0.0)
    throttles = [s.throttle_max_ms for s in samples if s.t >= throttle]
    return Outcome(
        pre_rate=pre, during=share(rate(samples, start, release)), worst_5s=share(worst),
        max_throttle_ms=max(throttles, default=0.0),
        recovery_s=_first_recovery(samples, release, RECOVERY_SHARE * pre, end),
        after_15s=share(rate(samples, release, min(end, release + RECOVERY_GOAL_S))),
        failed=samples[-1].failed if samples else 0)


def _steps(start: float, stop: float, step: float) -> list[float]:
    n = int((stop - start) / step) + 1 if stop >= start else 0
    return [start + i * step for i in range(n)]
