"""Simulated time: real elapsed time times a speed factor, adjustable and skippable at runtime."""
from __future__ import annotations

import threading
import time


class SimClock:
    """Simulated seconds since start; `speed` simulated seconds pass per real second."""

    def __init__(self, speed: float = 1.0):
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self._lock = threading.Lock()
        self._speed = float(speed)
        self._base_real = time.monotonic()
        self._base_sim = 0.0

    def now(self) -> float:
        with self._lock:
            return self._base_sim + (time.monotonic() - self._base_real) * self._speed

    @property
    def speed(self) -> float:
        return self._speed

    def set_speed(self, speed: float) -> None:
        """Change the rate from now on; simulated time already elapsed stays as it is."""
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        with self._lock:
            real = time.monotonic()
            self._base_sim += (real - self._base_real) * self._speed
            self._base_real = real
            self._speed = float(speed)

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward (tests: reach a fault's `at` without waiting)."""
        if seconds < 0:
            raise ValueError("simulated time only moves forward")
        with self._lock:
            self._base_sim += seconds

    def real_seconds_until(self, sim_time: float) -> float:
        """Real seconds until the clock shows sim_time (0 if already past)."""
        return max(0.0, (sim_time - self.now()) / self._speed)
