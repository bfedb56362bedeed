"""What the planner reads: each log dir's bytes and growth, every replica's size per log dir, replica assignments,
brokers' racks, the partitions already moving, and the topics never to move."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Dir:
    """One log dir of one broker; no bytes means offline. `growth`: bytes/s it fills at (0 when not sampled)."""

    broker: int
    path: str
    total: int | None
    available: int | None
    growth: float = 0.0

    @property
    def offline(self) -> bool:
        return self.total is None or self.available is None

    @property
    def key(self) -> tuple[int, str]:
        return self.broker, self.path


@dataclass(frozen=True)
class Replica:
    """One partition's replica on one log dir; `future`: the copy a move is writing (AlterReplicaLogDirs)."""

    topic: str
    partition: int
    broker: int
    path: str
    size: int
    growth: float = 0.0
    future: bool = False

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition


@dataclass(frozen=True)
class ClusterView:
    """One reading of a cluster, everything the plan depends on."""

    cluster: str
    racks: Mapping[int, str | None]  # every active broker and its rack (None: not set)
    dirs: tuple[Dir, ...]
    replicas: tuple[Replica, ...]
    assignments: Mapping[TopicPartition, tuple[int, ...]]
    reassigning: frozenset[TopicPartition] = frozenset()  # AlterPartitionReassignments in progress
    protected: frozenset[str] = frozenset()  # topics never moved (the decision topic on this cluster)
    cordon_supported: bool = False  # the brokers know cordoned.log.dirs (KIP-1066, Kafka 4.3)
    cordoned: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def moving(self) -> frozenset[TopicPartition]:
        """Partitions already being moved: a reassignment in progress, or a future replica on some dir."""
        return self.reassigning | frozenset(r.tp for r in self.replicas if r.future)

    def dir(self, broker: int, path: str) -> Dir | None:
        return next((d for d in self.dirs if d.broker == broker and d.path == path), None)


def log_dir_replicas(broker: int, log_dirs: Iterable[Mapping[str, Any]]) -> tuple[list[Dir], list[Replica]]:
    """Dirs and replicas from one broker's DescribeLogDirs results (kafka-python's `to_dict()` form)."""
    dirs, replicas = [], []
    for result in log_dirs:
        path = result["log_dir"]
        online = not result.get("error_code") and result.get("total_bytes", -1) >= 0
        dirs.append(Dir(broker, path, int(result["total_bytes"]) if online else None,
                        int(result["usable_bytes"]) if online else None))
        for topic in result.get("topics") or ():
            for p in topic.get("partitions") or ():
                replicas.append(Replica(topic["name"], int(p["partition_index"]), broker, path,
                                        int(p["partition_size"]), future=bool(p.get("is_future_key"))))
    return dirs, replicas


def with_growth(before: tuple[list[Dir], list[Replica]], after: tuple[list[Dir], list[Replica]],
                seconds: float) -> tuple[list[Dir], list[Replica]]:
    """The later reading, each dir and replica with the rate it grew at since the earlier one (never negative:
    retention freeing space is not a rate the plan can count on)."""
    if seconds <= 0:
        return after
    dirs_then = {d.key: d for d in before[0]}
    sizes_then = {(r.tp, r.broker, r.path, r.future): r.size for r in before[1]}
    dirs = []
    for d in after[0]:
        then = dirs_then.get(d.key)
        rate = 0.0 if then is None or d.offline or then.offline else max(0.0, (then.available - d.available) / seconds)
        dirs.append(Dir(d.broker, d.path, d.total, d.available, rate))
    replicas = [Replica(r.topic, r.partition, r.broker, r.path, r.size,
                        max(0.0, (r.size - sizes_then.get((r.tp, r.broker, r.path, r.future), r.size)) / seconds),
                        r.future) for r in after[1]]
    return dirs, replicas
