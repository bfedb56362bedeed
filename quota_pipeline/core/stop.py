"""What a stop admits: each client's produce limit derived from the longest mute, and how long the stop has lasted.

The Java callback's StopLimit and StopClock apply the same arithmetic; tests/vectors/broker_quota_vectors.json holds
both to it. Why the arithmetic holds (Kafka's quota sensors): docs/broker-side.md, "What a stop admits".
"""
from __future__ import annotations

import datetime as dt
import math
import threading
from dataclasses import dataclass

# The largest produce request of default clients: Java's max.request.size (librdkafka's message.max.bytes is 1,000,000).
REFERENCE_REQUEST_BYTES = 1_048_576.0
# Kafka's defaults: quota.window.num x quota.window.size.seconds.
DEFAULT_WINDOW_NUM = 11
DEFAULT_WINDOW_SIZE_SECONDS = 1
DEFAULT_MAX_MUTE = dt.timedelta(seconds=60)


@dataclass(frozen=True)
class StopLimit:
    """Each client's produce limit while production is stopped.

    Kafka appends a produce request, then charges it on the client's quota sensor and mutes the connection for
    (rate - limit) / limit x the measured window, uncapped, and does not unmute when the limit rises. A client muted
    at least one quota window (num x size, 11 s) finds its sensor's samples expired, so its next request of S bytes
    is measured over (num - 1) x size seconds and muted S / limit - (num - 1) x size. A limit of
    S / (M + (num - 1) x size) mutes a reference-size request exactly M, lets each librdkafka client about one such
    request through per M, and on a fresh sensor less than one before the first mute. That holds for every request
    size up to S only when M is at least (num - 1) x size + 2 x num x size (32 s by default): a smaller request whose
    first mute ends before its samples expire is charged again with the next one (the Java StopLimitTest checks it
    on Kafka's own sensor: 20 s mutes at 11 s). So that is the shortest mute.

    The mute lengthens while the stop lasts: twice its age in whole seconds, at least the shortest mute, at most
    `max_mute_seconds`. `floor` (the deprecated quota.pipeline.produce.quota.floor) fixes the limit instead."""

    max_mute_seconds: float = DEFAULT_MAX_MUTE.total_seconds()
    window_num: int = DEFAULT_WINDOW_NUM
    window_size_seconds: int = DEFAULT_WINDOW_SIZE_SECONDS
    floor: float | None = None

    @property
    def window_seconds(self) -> float:
        return float(self.window_num * self.window_size_seconds)

    @property
    def shortest_mute_seconds(self) -> float:
        """The shortest mute the arithmetic holds for, whatever the request size: (num - 1) x size + 2 x num x size."""
        return self.measured_seconds + 2 * self.window_seconds

    @property
    def measured_seconds(self) -> float:
        return float((self.window_num - 1) * self.window_size_seconds)

    @property
    def fixed(self) -> bool:
        return self.floor is not None

    def mute_seconds(self, stop_age_seconds: float) -> float:
        """The longest mute of a reference-size request after a stop of that age so far."""
        if self.floor is not None:
            return max(0.0, REFERENCE_REQUEST_BYTES / self.floor - self.measured_seconds)
        return min(self.max_mute_seconds,
                   max(self.shortest_mute_seconds, 2.0 * math.floor(min(max(0.0, stop_age_seconds), 1e15))))

    def limit(self, stop_age_seconds: float) -> float:
        """The per-client produce limit in bytes/s after a stop of that age so far."""
        if self.floor is not None:
            return self.floor
        return REFERENCE_REQUEST_BYTES / (self.mute_seconds(stop_age_seconds) + self.measured_seconds)

    def enter_limit(self) -> float:
        """The limit a stop starts with, the largest: a shared limit at or below it is answered as a stop."""
        return self.limit(0.0)

    def admitted_per_client(self, stop_age_seconds: float = math.inf, request_bytes: float = 1_000_000.0) -> float:
        """Bytes/s a broker admits from one client at that point of a stop: a client sending requests of that size
        (librdkafka's 1 MB by default) gets one through per mute; smaller ones are held to the limit itself."""
        limit = self.limit(stop_age_seconds)
        first = request_bytes / limit - self.measured_seconds
        return request_bytes / first if first >= self.window_seconds else limit


class StopClock:
    """How long the current stop has lasted. A stop that resumes within the longest mute of its release continues
    (its age keeps counting), so a factor flapping around 0 cannot shorten the mutes; a later one starts anew. The
    release is the first moment asked while not stopped: while stopped, clients may be muted for the whole max mute,
    so silence is no release. Thread-safe."""

    def __init__(self, continuation: dt.timedelta) -> None:
        self._continuation = continuation
        self._lock = threading.Lock()
        self._started: dt.datetime | None = None
        self._released: dt.datetime | None = None

    def age(self, now: dt.datetime, stopped: bool) -> float:
        """The stop's age in seconds at `now`; `stopped` says whether production is stopped at `now`."""
        with self._lock:
            if self._started is None:
                if not stopped:
                    return 0.0
                self._started = now
            elif not stopped:
                if self._released is None:
                    self._released = now
                if now - self._released > self._continuation:
                    return 0.0
            elif self._released is not None:
                if now - self._released > self._continuation:
                    self._started = now
                self._released = None
            return max(0.0, (now - self._started).total_seconds())


STOP_AUTHORIZER = "io.quotapipeline.callback.StopAuthorizer"
# The same stop without plugin metrics, for brokers before Kafka 4.1.
STOP_AUTHORIZERS = (STOP_AUTHORIZER, "io.quotapipeline.callback.BasicStopAuthorizer")


def describe(stop: StopLimit, produce: float | None, clients: tuple[int, ...] = (1, 8, 100, 300), *,
             refusal: bool = False, scope: str = "topics") -> list[str]:
    """What a stop means with this configuration, as `validate` prints it (comment lines of a properties file).
    `refusal`: the brokers' authorizer.class.name is StopAuthorizer, which refuses the writes at factor 0."""
    if refusal:
        refused = "every topic" if scope == "cluster" else "the topics the decision names (every topic when it names none)"
        lines = [f"# at factor 0 the brokers' StopAuthorizer refuses the writes to {refused}, never to the decision "
                 "topic, Kafka's internal topics or excluded principals: nothing is appended, no client is muted, and "
                 "a producer that retries is back at the release"]
        if produce is not None:
            lines.append("# graded factors (between 0 and 1): clients share produce x factor")
        return lines
    if stop.fixed:
        return [f"# at factor 0 writes are not refused: the quota throttle's floor gives each client {stop.floor:.0f} "
                f"bytes/s per broker (deprecated fixed floor): a 1 MiB "
                f"request is muted about {stop.mute_seconds(0):.0f} s, so a producer is back within that after the "
                "release"]
    first, longest = stop.mute_seconds(0), stop.max_mute_seconds
    per_client = stop.admitted_per_client()
    totals = ", ".join(f"{n}: {_rate(n * per_client)}" for n in clients)
    lines = [f"# at factor 0 writes are not refused: the quota throttle's floor gives each client "
             f"{stop.enter_limit():.0f} bytes/s per broker, down to {stop.limit(math.inf):.0f} as factor 0 lasts: "
             f"a 1 MiB request muted {first:.0f} s at first, lengthening to {longest:.0f} s after "
             f"{longest / 2:.0f} s at the floor",
             f"# a broker admits about N x {_rate(per_client)} from N librdkafka clients at a long floor ({totals}); "
             "Java clients (16 KiB batches) are held to the limit itself",
             f"# after the release a producer is back within {first:.0f} s after up to {first / 2:.0f} s at the floor, "
             f"within twice that time after a longer one, never later than {longest:.0f} s",
             "# producers below that per-client limit are not slowed at all; with "
             f"authorizer.class.name={STOP_AUTHORIZER} the brokers stop instead: writes refused"]
    if produce is not None and produce > stop.enter_limit():
        lines.append(f"# graded factors: clients share produce x factor (the total stays bounded); factors up to "
                     f"{stop.enter_limit() / produce:.4g} are held at the floor")
    return lines


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 1e6:.2f} MB/s" if bytes_per_second >= 1e6 else f"{bytes_per_second / 1e3:.1f} kB/s"
