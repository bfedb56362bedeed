"""How long an acks=all delivery can stall on the output cluster, and whether the validity covers it (pure policy).

A follower replica of the decision topic on a log dir that fails (ENOSPC) stops fetching. The leader advances the
high watermark, and so answers an acks=all produce, only past every replica in the ISR and every replica still
caught up (Kafka's Partition.maybeIncrementLeaderHW: a follower counts as caught up for replica.lag.time.max.ms after
its last fetch that reached the end of the log, whether or not it is still in the ISR). Two ways the follower goes:
- the controller drops it (KRaft, Kafka 3.7+: its broker reports the offline log dir within a heartbeat, about
  0.5 s), yet the produce already waiting stays in the leader's purgatory: nothing re-examines it, and the broker
  serves one request per connection at a time, so the producer's next request waits behind it. It is answered at
  the producer's request.timeout.ms; the idempotent retry is answered at once if the follower's last fetch is by
  then replica.lag.time.max.ms old, else it waits a whole request timeout again: request.timeout.ms x
  ceil(replica.lag.time.max.ms / request.timeout.ms) in all;
- the leader drops it itself (a follower that stops fetching without the controller knowing): out of sync for one
  lag, noticed within half a lag (the isr-expiration task), so at most 1.5 x replica.lag.time.max.ms.
Measured on Kafka 4.1 (bench/isr_stall.py, bench/RESULTS.md): 10.0 s with request.timeout.ms 10000 and lag 3000, 30.0
s with 30000/3000 and 30000/30000, 60.0 s with 60000/30000, 18.0 s with 9000/10000 (two timeouts) and 12.1 s with
4000/10000 (three). SLACK_S covers the retries' backoff and round trips.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from quota_pipeline.core import config as cfg

REPLICA_LAG = "replica.lag.time.max.ms"
REQUEST_TIMEOUT = "request.timeout.ms"
SHRINK_WAIT_PER_LAG = 1.5  # out of sync for one lag, noticed within half a lag
SLACK_S = 2.0  # the retry's backoff (librdkafka: 100 ms to 1 s) and the round trips
DEFAULT_REQUEST_TIMEOUT_MS = 30000  # librdkafka's, as the Java producer's
MIN_REQUEST_TIMEOUT_MS = 5000  # lower than this, a busy but healthy cluster times produce requests out


def timeouts_waited(request_timeout_s: float, replica_lag_s: float) -> int:
    """How many request timeouts a produce waits for a follower that failed while it was caught up."""
    return max(1, math.ceil(replica_lag_s / request_timeout_s)) if request_timeout_s > 0 else 1


def longest_stall(request_timeout_s: float, replica_lag_s: float) -> float:
    """Seconds an acks=all delivery can wait for a follower whose log dir failed (see the module's docstring)."""
    return max(timeouts_waited(request_timeout_s, replica_lag_s) * request_timeout_s,
               SHRINK_WAIT_PER_LAG * replica_lag_s) + SLACK_S


@dataclass(frozen=True)
class StallCheck:
    """One config's numbers against the output cluster's largest replica.lag.time.max.ms."""

    config_path: str
    check_interval_s: float
    validity_s: float
    request_timeout_ms: int  # the publisher's (quota.pipeline.output.kafka.request.timeout.ms)
    replica_lag_ms: int  # the largest among the output cluster's brokers

    @property
    def stall_s(self) -> float:
        return longest_stall(self.request_timeout_ms / 1000, self.replica_lag_ms / 1000)

    @property
    def needed_s(self) -> float:
        """The validity that keeps readers off their fallback through one such stall."""
        return self.check_interval_s + self.stall_s

    @property
    def covered(self) -> bool:
        return self.validity_s >= self.needed_s

    def warning(self) -> str | None:
        """One line naming the numbers and what to change, or None when the validity covers the stall."""
        if self.covered:
            return None
        room_ms = int((self.validity_s - self.check_interval_s - SLACK_S) * 1000)  # the stall the validity covers
        lower = []
        if room_ms >= MIN_REQUEST_TIMEOUT_MS:  # else no timeout that short is sensible: only the validity helps
            if self.request_timeout_ms > room_ms:
                lower.append(f"lower {cfg.OUTPUT_KAFKA_PREFIX}{REQUEST_TIMEOUT} to {room_ms}")
            if SHRINK_WAIT_PER_LAG * self.replica_lag_ms > room_ms:
                lower.append(f"lower {REPLICA_LAG} on the output cluster's brokers to "
                             f"{int(room_ms / SHRINK_WAIT_PER_LAG)}")
        alternative = f" (or {' and '.join(lower)})" if lower else ""
        return (f"{self.config_path}: {cfg.VALIDITY}={_iso(self.validity_s)} does not cover the check "
                f"interval ({self.check_interval_s:g} s) plus the longest acks=all stall of the output cluster "
                f"({self.stall_s:g} s = max({self._timeouts()}{REQUEST_TIMEOUT} {self.request_timeout_ms}, "
                f"{SHRINK_WAIT_PER_LAG:g} x {REPLICA_LAG} {self.replica_lag_ms}) + {SLACK_S:g} s, while a replica "
                f"of the decision topic sits on a failed log dir): every reader would apply its fallback between "
                f"two decisions; set {cfg.VALIDITY} to at least {_iso(self.needed_s)}{alternative}")

    def _timeouts(self) -> str:
        """'N x ' when a retry waits again (the lag longer than the request timeout), else nothing."""
        n = timeouts_waited(self.request_timeout_ms / 1000, self.replica_lag_ms / 1000)
        return f"{n} x " if n > 1 else ""


def _iso(seconds: float) -> str:
    return f"PT{int(-(-seconds // 1))}S"  # rounded up: the advice must cover the need


def check(conf: cfg.Config, request_timeout_ms: int, replica_lag_ms: int) -> StallCheck:
    return StallCheck(conf.path, conf.check_interval.total_seconds(), conf.validity.total_seconds(),
                      request_timeout_ms, replica_lag_ms)


def request_timeout_ms(output_settings: dict[str, str]) -> int:
    """The publisher's produce request timeout (quota.pipeline.output.kafka.request.timeout.ms, else the client's)."""
    try:
        return int(output_settings.get(REQUEST_TIMEOUT, DEFAULT_REQUEST_TIMEOUT_MS))
    except ValueError:
        return DEFAULT_REQUEST_TIMEOUT_MS


def warning_for(configs: list[cfg.Config], replica_lag_ms: int) -> str | None:
    """One warning for every config publishing to that output cluster whose validity does not cover the stall: the
    one needing the most named in full, the others by path."""
    checks = [check(c, request_timeout_ms(c.output_settings), replica_lag_ms) for c in configs]
    uncovered = sorted((c for c in checks if not c.covered), key=lambda c: c.validity_s - c.needed_s)
    if not uncovered:
        return None
    others = [c.config_path for c in uncovered[1:]]
    return uncovered[0].warning() + (f"; likewise {len(others)} other config(s): {', '.join(others)}" if others else "")
