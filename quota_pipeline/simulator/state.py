"""The simulated cluster's state: log dir usage over time, active faults, and runtime changes to both."""
from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from quota_pipeline.simulator.quota_store import ClientQuotaStore
from quota_pipeline.simulator.clock import SimClock
from quota_pipeline.simulator.scenario import FaultSpec, LogDirSpec, Scenario

KAFKA_STORAGE_ERROR = 56


@dataclass(frozen=True)
class LogDirReading:
    """What one DescribeLogDirs result says about one log dir."""

    path: str
    error_code: int
    total_bytes: int
    usable_bytes: int
    topics: tuple[tuple[str, int], ...] = ()  # (topic, partitions) hosted, each partition an equal share of the use


class LogDir:
    """Usage of one volume: a base point plus a fill rate, a piecewise timeline, or real statvfs readings."""

    def __init__(self, spec: LogDirSpec):
        self.path = spec.path
        self.total_bytes = spec.total_bytes
        self.fill_rate = spec.fill_rate
        self.timeline = spec.timeline
        self.offline_when_full = spec.offline_when_full
        self.statvfs = spec.statvfs
        self.topics = spec.topics
        self.offline = False  # sticky, like a Kafka log dir after ENOSPC: only an explicit restore clears it
        self._base_used = spec.used_bytes
        self._base_time = 0.0

    def used(self, t: float) -> float:
        if self.timeline:
            return _interpolate(self.timeline, t)
        return self._base_used + self.fill_rate * (t - self._base_time)

    def reading(self, t: float) -> tuple[int, int]:
        """(total, available) bytes at simulated time t; available clamps to [0, total]."""
        if self.statvfs is not None:
            st = os.statvfs(self.statvfs)
            return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        total = self.total_bytes
        available = int(total - self.used(t))
        return total, min(max(available, 0), total)

    def settle(self, t: float) -> tuple[int, int]:
        """`reading(t)`, the dir taken offline (for good) when it goes offline when full and is full."""
        total, available = self.reading(t)
        if self.offline_when_full and available <= 0:
            self.offline = True
        return total, available

    def rebase(self, t: float, used: float) -> None:
        """Usage is `used` at t and follows the fill rate from there (a timeline stops applying)."""
        self.timeline = ()
        self._base_used = min(max(used, 0.0), float(self.total_bytes))
        self._base_time = t


def _interpolate(points: tuple[tuple[float, float], ...], t: float) -> float:
    if t <= points[0][0]:
        return points[0][1]
    for (t0, u0), (t1, u1) in zip(points, points[1:]):
        if t < t1:
            return u0 + (u1 - u0) * (t - t0) / (t1 - t0) if t1 > t0 else u1
    return points[-1][1]


class Broker:
    def __init__(self, broker_id: int, port: int, rack: str | None, log_dirs: list[LogDir]):
        self.broker_id = broker_id
        self.port = port
        self.rack = rack
        self.log_dirs = log_dirs

    def log_dir(self, which: str | int) -> LogDir:
        if isinstance(which, int):
            return self.log_dirs[which]
        for d in self.log_dirs:
            if d.path == which:
                return d
        raise KeyError(f"broker {self.broker_id} has no log dir {which!r}; it has {[d.path for d in self.log_dirs]}")


class SimulatedCluster:
    """Everything the protocol handlers ask, answered for the current simulated time. Thread-safe:
    tests and the demo change it from their own thread while the server's event loop reads it."""

    def __init__(self, scenario: Scenario, base_port: int, clock: SimClock, host: str):
        self._lock = threading.RLock()
        self.clock = clock
        self.cluster_id = scenario.cluster_id
        self.host = host
        self.brokers: dict[int, Broker] = {
            spec.broker_id: Broker(spec.broker_id, base_port + i, spec.rack, [LogDir(d) for d in spec.log_dirs])
            for i, spec in enumerate(scenario.brokers)
        }
        self.faults: list[FaultSpec] = list(scenario.faults)
        for f in self.faults:
            self._check_fault(f)
        self.client_quotas = ClientQuotaStore()  # KIP-546 entities, in memory; see simulator/quota_store.py
        self.wire_results: dict[tuple[int, int], dict[str, Any]] = {}  # protocol.describe_log_dirs' results

    # ---- queries from the protocol handlers -------------------------------------------------

    def now(self) -> float:
        return self.clock.now()

    def _active(self, kind: str, broker_id: int, t: float) -> list[FaultSpec]:
        return [f for f in self.faults if f.type == kind and f.applies_to(broker_id) and f.active(t)]

    def listening(self, broker_id: int, t: float | None = None) -> bool:
        with self._lock:
            return not self._active("broker_down", broker_id, self.now() if t is None else t)

    def fenced(self, broker_id: int, t: float | None = None) -> bool:
        t = self.now() if t is None else t
        with self._lock:
            if self._active("broker_fenced", broker_id, t):
                return True
            return any(t >= f.at + f.fence_after for f in self._active("broker_down", broker_id, t))

    def unfenced_brokers(self) -> list[Broker]:
        t = self.now()
        with self._lock:
            return [b for b in self.brokers.values() if not self.fenced(b.broker_id, t)]

    def fenced_brokers(self) -> list[Broker]:
        t = self.now()
        with self._lock:
            return [b for b in self.brokers.values() if self.fenced(b.broker_id, t)]

    def has_fault(self, kind: str, broker_id: int, api: str | None = None) -> FaultSpec | None:
        with self._lock:
            for f in self._active(kind, broker_id, self.now()):
                if api is None or f.affects_api(api):
                    return f
        return None

    def delay_seconds(self, broker_id: int, api: str) -> float:
        with self._lock:
            delays = [f.delay_ms for f in self._active("slow", broker_id, self.now()) if f.affects_api(api)]
        return max(delays, default=0) / 1000.0

    def log_dir_readings(self, broker_id: int) -> list[LogDirReading]:
        t = self.now()
        with self._lock:
            broker = self.brokers[broker_id]
            if self._active("omit_log_dirs", broker_id, t):
                return []
            no_bytes = bool(self._active("no_byte_counts", broker_id, t))
            offline_paths = {f.log_dir for f in self._active("log_dir_offline", broker_id, t)}
            out = []
            for d in broker.log_dirs:
                total, available = d.settle(t)
                if d.offline or d.path in offline_paths:
                    out.append(LogDirReading(d.path, KAFKA_STORAGE_ERROR, -1, -1))
                elif no_bytes:
                    out.append(LogDirReading(d.path, 0, -1, -1, d.topics))
                else:
                    out.append(LogDirReading(d.path, 0, total, available, d.topics))
            return out

    def settle_full(self, broker_id: int) -> None:
        """Take the broker's full log dirs offline that go offline when full (as reading them would), reading only
        those: a simulator reconciles often, and reading every dir of a large cluster each time was most of its
        CPU."""
        t = self.now()
        with self._lock:
            for d in self.brokers[broker_id].log_dirs:
                if d.offline_when_full and not d.offline:
                    d.settle(t)

    def volumes(self) -> dict[int, dict[str, tuple[int, int] | None]]:
        """Ground truth for tests: broker -> log dir -> (total, available), None when offline."""
        t = self.now()
        with self._lock:
            out: dict[int, dict[str, tuple[int, int] | None]] = {}
            for b in self.brokers.values():
                offline = {f.log_dir for f in self._active("log_dir_offline", b.broker_id, t)}
                out[b.broker_id] = {}
                for d in b.log_dirs:
                    total, available = d.reading(t)
                    full = d.offline or (d.offline_when_full and available <= 0)
                    out[b.broker_id][d.path] = None if full or d.path in offline else (total, available)
            return out

    # ---- runtime changes (tests, demo) -------------------------------------------------------

    def log_dir(self, broker_id: int, log_dir: str | int = 0) -> LogDir:
        if broker_id not in self.brokers:
            raise KeyError(f"no broker {broker_id}; brokers are {sorted(self.brokers)}")
        return self.brokers[broker_id].log_dir(log_dir)

    def set_used(self, broker_id: int, log_dir: str | int, used_bytes: float) -> None:
        with self._lock:
            self.log_dir(broker_id, log_dir).rebase(self.now(), used_bytes)

    def set_available(self, broker_id: int, log_dir: str | int, available_bytes: float) -> None:
        with self._lock:
            d = self.log_dir(broker_id, log_dir)
            d.rebase(self.now(), d.total_bytes - available_bytes)

    def fill(self, broker_id: int, log_dir: str | int, nbytes: float) -> None:
        """Write nbytes more (negative frees space)."""
        with self._lock:
            d, t = self.log_dir(broker_id, log_dir), self.now()
            d.rebase(t, d.used(t) + nbytes)

    def set_fill_rate(self, broker_id: int, log_dir: str | int, bytes_per_second: float) -> None:
        with self._lock:
            d, t = self.log_dir(broker_id, log_dir), self.now()
            d.rebase(t, d.used(t))
            d.fill_rate = float(bytes_per_second)

    def set_offline(self, broker_id: int, log_dir: str | int, offline: bool = True) -> None:
        """Take a log dir offline (KAFKA_STORAGE_ERROR) or restore it (as a broker restart would)."""
        with self._lock:
            self.log_dir(broker_id, log_dir).offline = offline

    def add_fault(self, fault: FaultSpec | Mapping[str, Any]) -> FaultSpec:
        """Add a fault (a FaultSpec or a dict in scenario format); `at` defaults to now."""
        if not isinstance(fault, FaultSpec):
            raw = dict(fault)
            raw.setdefault("at", self.now())
            fault = FaultSpec.from_json(raw)
        self._check_fault(fault)
        with self._lock:
            self.faults.append(fault)
        return fault

    def remove_fault(self, fault: FaultSpec) -> None:
        with self._lock:
            self.faults.remove(fault)

    def end_faults(self, kind: str | None = None, broker_id: int | None = None) -> int:
        """End active or scheduled faults (of one kind, for one broker) now; returns how many."""
        t = self.now()
        ended = 0
        with self._lock:
            for i, f in enumerate(self.faults):
                if (kind is None or f.type == kind) and (broker_id is None or f.applies_to(broker_id)) \
                        and (f.until is None or f.until > t):
                    self.faults[i] = dataclasses.replace(f, until=max(t, f.at))
                    ended += 1
        return ended

    def broker_down(self, broker_id: int, fence_after: float | None = None) -> FaultSpec:
        """Stop a broker's listener now (connection refused); the cluster fences it after fence_after."""
        raw: dict[str, Any] = {"type": "broker_down", "broker": broker_id}
        if fence_after is not None:
            raw["fence_after"] = fence_after
        return self.add_fault(raw)

    def broker_up(self, broker_id: int) -> None:
        self.end_faults("broker_down", broker_id)

    def _check_fault(self, fault: FaultSpec) -> None:
        for b in fault.brokers or ():
            if b not in self.brokers:
                raise KeyError(f"fault {fault.type}: no broker {b}; brokers are {sorted(self.brokers)}")
        if fault.log_dir is not None:
            for b in fault.brokers or self.brokers:
                self.brokers[b].log_dir(fault.log_dir)
