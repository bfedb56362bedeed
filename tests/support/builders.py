"""Tiny, readable builders for snapshots and settings in tests."""
from __future__ import annotations

import datetime as dt

from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import Status, Volume, VolumeSnapshot

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
GB = 10 ** 9


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def vol(broker: int, free: int | None, total: int = 100 * GB, log_dir: str = "/d0") -> Volume:
    """A reading with `free` bytes available; free=None is an offline (KAFKA_STORAGE_ERROR) dir."""
    if free is None:
        return Volume(broker, log_dir, None, None, "KAFKA_STORAGE_ERROR")
    return Volume(broker, log_dir, total, free)


def ok(seconds: float, *volumes: Volume, brokers=None, fenced=(), cluster="c1") -> VolumeSnapshot:
    listed = tuple(sorted({v.broker_id for v in volumes})) if brokers is None else tuple(brokers)
    return VolumeSnapshot(cluster, at(seconds), Status.SUCCESS, listed, tuple(fenced), tuple(volumes))


def failed(seconds: float, status: Status = Status.TIMEOUT, cluster="c1") -> VolumeSnapshot:
    return VolumeSnapshot(cluster, at(seconds), status)


def partial(seconds: float, *volumes: Volume, brokers, fenced=(), status: Status = Status.DESCRIBE_LOG_DIRS_ERROR,
            cluster="c1") -> VolumeSnapshot:
    """A poll in which only the brokers of `volumes` answered DescribeLogDirs (the others of `brokers` did not)."""
    return VolumeSnapshot(cluster, at(seconds), status, tuple(brokers), tuple(fenced), tuple(volumes),
                          message="broker 2: KafkaConnectionError")


def settings(hard_bytes: int = 10 * GB, soft_bytes: int | None = None, validity_s: float = 300,
             fallback: float = 0.5, offline: str = "pin", fenced: str = "pin", closest: int = 5,
             eta: tuple[float, float] = (0, 3600)) -> Settings:
    """`eta`: the predictive step's (horizon, window) in seconds; a horizon of 0 is off."""
    soft = None if soft_bytes is None else Limit("bytes", soft_bytes)
    return Settings(Limits(Limit("bytes", hard_bytes), soft), dt.timedelta(seconds=validity_s), fallback, offline, fenced,
                    closest, dt.timedelta(seconds=eta[0]), dt.timedelta(seconds=eta[1]))


class MemoryValue:
    """A value state in memory, as the state store would hold it."""

    def __init__(self) -> None:
        self.value = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self):
        return self.value

    def update(self, value) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class MemoryHandle:
    """A StatefulProcessorHandle whose value states live in `states`: the stateful step run outside Spark."""

    def __init__(self) -> None:
        self.states: dict[str, MemoryValue] = {}

    def getValueState(self, name, schema):
        return self.states.setdefault(name, MemoryValue())


def spark_rows(rows) -> list:
    """The source's row tuples as the Rows Spark hands the stateful step (streaming/processor.py)."""
    from pyspark.sql import Row

    from quota_pipeline.streaming import source

    names = [f.split()[0] for f in source.ROW_SCHEMA.split(", ")]
    return [Row(**dict(zip(names, r))) for r in rows]
