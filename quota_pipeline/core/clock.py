"""The one clock every part reads time through: wall time for records, monotonic time for waiting.

Injected like Strimzi's `java.time.Clock`: tests pass a ManualClock; the simulator passes its own.
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Protocol

UTC = dt.timezone.utc


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """Aware UTC wall time, millisecond precision (the precision of every record)."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going back: for timeouts and intervals."""


def truncate_ms(t: dt.datetime) -> dt.datetime:
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


@dataclass(frozen=True)
class SystemClock:
    """The machine's clocks."""

    def now(self) -> dt.datetime:
        return truncate_ms(dt.datetime.now(UTC))

    def monotonic(self) -> float:
        return time.monotonic()

    def epoch_seconds(self) -> float:
        return time.time()


SYSTEM = SystemClock()


@dataclass
class ManualClock:
    """A clock that moves only when told to: for tests and for deterministic replays of a story."""

    t: dt.datetime = dt.datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    mono: float = 0.0

    def now(self) -> dt.datetime:
        return self.t

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> dt.datetime:
        self.t += dt.timedelta(seconds=seconds)
        self.mono += seconds
        return self.t
