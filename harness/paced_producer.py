"""A paced confluent-kafka producer on a real cluster that records when each byte was acknowledged, and the search
for the first 1-s window of its rate that meets a goal."""
from __future__ import annotations

import bisect
import threading
import time
from typing import Any, Callable

RECORD_BYTES = 10 * 1024


class PacedProducer:
    """Produces RECORD_BYTES records at `rate` bytes/s to `topic` from its own thread until stop()."""

    def __init__(self, conf: dict[str, Any], topic: str, client_id: str, rate: float, partition: int = -1) -> None:
        from confluent_kafka import Producer
        self.topic, self.rate, self.partition = topic, rate, partition  # -1: librdkafka's partitioner
        self.acked: list[tuple[float, int]] = []  # (monotonic time, cumulative bytes acknowledged)
        self.throttles: list[tuple[float, float]] = []  # (monotonic time, throttle time in s) the broker reported
        self.errors: list[tuple[float, str]] = []  # (monotonic time, error) of records not delivered
        self._producer = Producer({**conf, "client.id": client_id, "linger.ms": 5, "throttle_cb": lambda event:
                                   self.throttles.append((time.monotonic(), event.throttle_time))})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{client_id}", daemon=True)

    def start(self) -> "PacedProducer":
        self._thread.start()
        return self

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is None:
            total = self.acked[-1][1] if self.acked else 0
            self.acked.append((time.monotonic(), total + RECORD_BYTES))
        elif len(self.errors) < 100:
            self.errors.append((time.monotonic(), str(err)))

    def timeline(self, since: float, until: float, step: float = 1.0) -> list[tuple[float, int]]:
        """(s from `since`, kB/s acknowledged in the `step` after it): what a failed recovery test shows."""
        return [(round(t - since, 1), int(self.rate_between(t, t + step) / 1000))
                for t in (since + step * i for i in range(int((until - since) / step)))]

    def queued(self) -> int:
        """Records produced and not yet acknowledged or failed."""
        return len(self._producer) if self._producer is not None else 0

    def _run(self) -> None:
        record = bytes(RECORD_BYTES)
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                self._producer.produce(self.topic, record, partition=self.partition, on_delivery=self._delivered)
            except BufferError:  # the queue is full while throttled: wait for room, keep the pace afterwards
                self._producer.poll(0.05)
                continue
            due = max(due + RECORD_BYTES / self.rate, time.monotonic() - 1.0)
            self._producer.poll(max(0.0, due - time.monotonic()))

    def bytes_by(self, t: float) -> int:
        i = bisect.bisect_right(self.acked, (t, float("inf"))) - 1
        return self.acked[i][1] if i >= 0 else 0

    def rate_between(self, start: float, end: float) -> float:
        """Bytes/s acknowledged in [start, end) (monotonic times)."""
        return (self.bytes_by(end) - self.bytes_by(start)) / (end - start)

    def paced_rate(self, window: float = 3.0, settle: float = 1.5, within: float = 30.0) -> float:
        """Bytes/s acknowledged over `window` s that start `settle` s after the first acknowledgement (0.0 if none
        comes within `within` s).

        The first acknowledgement waits for the connection and metadata, seconds on a loaded machine, and brings the
        records queued meanwhile at once: a window at a fixed time after start() measured that wait, not the pace."""
        deadline = time.monotonic() + within
        while not self.acked and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.acked:
            return 0.0
        start = self.acked[0][0] + settle
        time.sleep(max(0.0, start + window - time.monotonic()))
        return self.rate_between(start, start + window)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.purge()
        self._producer.flush(0)
        self._producer = None  # destroyed now, not when the cluster is already gone


STEP_S = 0.25  # windows start every 0.25 s


def first_window(since: float, until: float, accept: Callable[[float, float], bool]) -> float | None:
    """Seconds from `since` to the end of the first 1-s window [a, a + 1) (steps of STEP_S) that `accept(a, a + 1)`
    takes, or None within `until`."""
    t = since + 1.0
    while t <= until:
        if accept(t - 1.0, t):
            return t - since
        t += STEP_S
    return None


def window_starts(start: float, end: float) -> list[float]:
    """The window starts from `start` to `end`, STEP_S apart."""
    return [start + STEP_S * i for i in range(int((end - start) / STEP_S) + 1)]
