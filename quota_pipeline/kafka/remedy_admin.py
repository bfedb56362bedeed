"""The Admin API calls `remedy` makes, through kafka-python's KafkaAdminClient: what is where, and the moves."""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

import kafka.errors as Errors
from kafka import TopicPartition, TopicPartitionReplica
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient

from quota_pipeline.kafka.admin import CommandAdmin

log = logging.getLogger(__name__)

BROKER, TOPIC = "broker", "topic"
_TYPES = {BROKER: ConfigResourceType.BROKER, TOPIC: ConfigResourceType.TOPIC}

TP = tuple[str, int]


class RemedyAdminError(RuntimeError):
    """A call the cluster refused or could not answer; the message says what to do."""


class RemedyAdmin(CommandAdmin):
    """One admin client for a plan's readings and moves; every failure becomes a RemedyAdminError."""

    error = RemedyAdminError

    def _call(self, what: str, fn: Callable[[KafkaAdminClient], Any]) -> Any:
        client = self._connect()
        try:
            return fn(client)
        except (Errors.KafkaError, ValueError) as exc:
            self.close()  # the next call reconnects
            raise RemedyAdminError(f"{what} on {self.bootstrap} failed: {type(exc).__name__}: {exc}; check that the "
                                   "cluster is reachable and that the principal may (ALTER and DESCRIBE on the "
                                   "cluster, DESCRIBE_CONFIGS and ALTER_CONFIGS on topics), and retry") from None

    def cluster(self) -> tuple[str, dict[int, str | None]]:
        """The cluster id and every active (unfenced) broker with its rack."""
        found = self._call("DescribeCluster", lambda c: c.describe_cluster())
        return str(found.get("cluster_id") or ""), {int(b["broker_id"]): b.get("rack") for b in found["brokers"]
                                                    if not b.get("is_fenced")}

    def assignments(self) -> dict[TP, tuple[int, ...]]:
        """Every partition's replica list, in order (the first is the preferred leader)."""
        topics = self._call("Metadata", lambda c: c.describe_topics())
        return {(t["name"], int(p["partition_index"])): tuple(int(b) for b in p["replica_nodes"])
                for t in topics if not t.get("error_code") for p in t["partitions"]}

    def log_dirs(self, brokers: list[int]) -> dict[int, list[dict[str, Any]]]:
        """Each broker's DescribeLogDirs results, every partition listed (future replicas too)."""
        out = {}
        for b in brokers:
            answer = self._call(f"DescribeLogDirs on broker {b}", lambda c: c.describe_log_dirs(brokers=[b]))
            out[b] = answer[0]["log_dirs"] if answer else []
        return out

    def reassignments(self) -> dict[TP, dict[str, list[int]]]:
        """The reassignments in progress: replicas, adding_replicas, removing_replicas."""
        found = self._call("ListPartitionReassignments", lambda c: c.list_partition_reassignments())
        return {(tp.topic, tp.partition): v for tp, v in found.items()}

    def move_within(self, moves: Mapping[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str | None]:
        """AlterReplicaLogDirs: each (topic, partition, broker) to a log dir; the error's name per replica or None."""
        asked = {TopicPartitionReplica(t, p, b): d for (t, p, b), d in moves.items()}
        found = self._call("AlterReplicaLogDirs", lambda c: c.alter_replica_log_dirs(asked))
        return {(k.topic, k.partition, k.broker_id): None if e is Errors.NoError else e.__name__ for k, e in found.items()}

    def reassign(self, replicas: Mapping[TP, tuple[int, ...] | None]) -> dict[TP, str | None]:
        """AlterPartitionReassignments (None cancels one in progress); the error's name per partition or None."""
        asked = {TopicPartition(t, p): None if r is None else list(r) for (t, p), r in replicas.items()}
        found = self._call("AlterPartitionReassignments", lambda c: c.alter_partition_reassignments(asked))
        return {(tp.topic, tp.partition): None if e is None else getattr(e, "__name__", str(e))
                for tp, e in found.items()}

    def configs(self, resources: list[tuple[str, str]], keys: list[str]) -> dict[tuple[str, str], dict[str, tuple[str | None, str]]]:
        """Each resource's value and source (`config_source`) of `keys`; a key the broker does not know is absent."""
        asked = [ConfigResource(_TYPES[kind], name, {k: None for k in keys}) for kind, name in resources]
        found = self._call("DescribeConfigs", lambda c: c.describe_configs(asked, config_filter="all"))
        out: dict[tuple[str, str], dict[str, tuple[str | None, str]]] = {}
        for kind, name in resources:
            entries = found.get(kind, {}).get(name, {})
            out[kind, name] = {k: (v.get("value"), str(v.get("config_source"))) for k, v in entries.items()}
        return out

    def alter(self, changes: list[tuple[str, str, str, str, str | None]]) -> None:
        """IncrementalAlterConfigs: (kind, name, key, op SET|DELETE|APPEND|SUBTRACT, value); raises with every
        resource the cluster refused."""
        grouped: dict[tuple[str, str], dict[str, Any]] = {}
        for kind, name, key, op, value in changes:
            grouped.setdefault((kind, name), {})[key] = (AlterConfigOp[op], value)
        if not grouped:
            return
        asked = [ConfigResource(_TYPES[kind], name, cfgs) for (kind, name), cfgs in grouped.items()]
        found = self._call("IncrementalAlterConfigs",
                           lambda c: c.alter_configs(asked, raise_on_unknown=False, incremental=True))
        failed = [f"{kind} {name}: {result}" for kind, by_name in found.items() for name, result in by_name.items()
                  if result != "OK"]
        if failed:
            raise RemedyAdminError("IncrementalAlterConfigs refused " + "; ".join(failed)
                                   + "; the principal needs ALTER_CONFIGS on the cluster and the topics")
