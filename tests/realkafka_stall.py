"""A 2-node cluster whose decision topic has its follower replica on a tmpfs log dir, and the fill that fails it.

Node 2 leads the topic's one partition from a disk log dir; node 1 follows it from a tmpfs. Filling the tmpfs
makes node 1's next append fail with ENOSPC, its log dir goes offline, and an acks=all producer waits until the
leader drops node 1 from the ISR (replica.lag.time.max.ms). Used by tests/test_stream_stall_real.py and
bench/isr_stall.py.
"""
from __future__ import annotations

import errno
import os
from typing import Mapping

from tests.realkafka import ClusterSpec, RealKafka, start_cluster, with_admin
from tests.realkafka_process import FAST_START_JVM
from tests.realkafka_props import wait_for

LEADER, FOLLOWER = 2, 1
TMPFS_MB = 32


def stall_cluster(replica_lag_ms: int, overrides: Mapping[str, str] | None = None) -> RealKafka:
    """2 combined nodes, 2 log dirs each, node 1's second one a tmpfs (root only: TmpfsUnavailable otherwise)."""
    return start_cluster(ClusterSpec(nodes=2, log_dirs=2, tmpfs_mb=TMPFS_MB, jvm_opts=FAST_START_JVM, overrides={
        "replica.lag.time.max.ms": str(replica_lag_ms), **(overrides or {})}))


def tmpfs_dir(cluster: RealKafka) -> str:
    return cluster.log_dirs[FOLLOWER][-1]


def create_decision_topic(cluster: RealKafka, topic: str) -> None:
    """The topic as `ensure_topic` makes it on 2 brokers (compacted, replication 2, min.insync.replicas 1), led by
    node 2 with node 1's replica moved to the tmpfs; returns once node 1 holds it there."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=1,
                                 replica_assignment=[[LEADER, FOLLOWER]], config={
        "cleanup.policy": "compact", "min.insync.replicas": "1"})])[topic].result(30)
    target = tmpfs_dir(cluster)

    def placed() -> bool:
        with_admin(cluster, lambda a: a.alter_replica_log_dirs({(topic, 0, FOLLOWER): target}))
        dirs = with_admin(cluster, lambda a: a.describe_log_dirs(brokers=[FOLLOWER]))
        return any(d["log_dir"] == target and any(t["name"] == topic for t in d["topics"])
                   for broker in dirs for d in broker["log_dirs"])
    wait_for(placed, 30, f"node {FOLLOWER}'s replica of {topic} is on its tmpfs {target}", every=1.0)


def fill(directory: str) -> int:
    """Write a ballast file until the file system refuses with ENOSPC; the bytes written."""
    written = 0
    with open(os.path.join(directory, "ballast"), "wb", buffering=0) as fh:
        chunk = bytes(1 << 20)
        while True:
            try:
                written += fh.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk = chunk[:len(chunk) // 2]
                if not chunk:
                    return written


def isr(cluster: RealKafka, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(cluster.client_config()).list_topics(topic, timeout=10).topics[topic]
    return sorted(meta.partitions[0].isrs)
