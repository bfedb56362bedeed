"""A 2-node cluster whose decision topic has its follower replica on a tmpfs log dir, and the fill that fails it.

Node 2 leads the topic's one partition from a disk log dir; node 1 follows it from a tmpfs. Filling the tmpfs
makes node 1's next append that needs a new page fail with ENOSPC (its log dir goes offline), or, with a segment
per record, its next roll (its replica is marked failed), and the acks=all produce of that record waits: the leader
holds it while node 1 counts as caught up, replica.lag.time.max.ms after its last fetch. Then either the leader
drops node 1 from the ISR itself (its isr-expiration task, every half lag) and answers, or, when the controller
dropped it first (node 1 reports its offline dir in a heartbeat), nothing re-examines the produce before its
request.timeout.ms, and a retry within the lag waits a whole timeout again.
Used by tests/realkafka/test_stream_stall.py and bench/isr_stall.py.
"""
from __future__ import annotations

import errno
import os
import re
from typing import Mapping

from harness.kafka import ClusterSpec, RealKafka, start_cluster, with_admin
from harness.kafka_process import FAST_START_JVM
from harness.kafka_client import wait_for

LEADER, FOLLOWER = 2, 1
TMPFS_MB = 32


# The periodic checkpoints every log dir gets (high watermarks every 5 s, recovery points and log start offsets
# every 60 s) would fail the full tmpfs between two decisions, with none waiting on the leader; the next one then
# stalls only if it comes within replica.lag.time.max.ms of the follower's last fetch. Put off, the first write to
# the tmpfs after the fill is the follower's append of a decision, which therefore waits: the stall is certain.
NO_PERIODIC_CHECKPOINTS = {name: "3600000" for name in (
    "replica.high.watermark.checkpoint.interval.ms", "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms")}


def stall_cluster(replica_lag_ms: int, overrides: Mapping[str, str] | None = None) -> RealKafka:
    """2 combined nodes, 2 log dirs each, node 1's second one a tmpfs (root only: TmpfsUnavailable otherwise)."""
    return start_cluster(ClusterSpec(nodes=2, log_dirs=2, tmpfs_mb=TMPFS_MB, jvm_opts=FAST_START_JVM, overrides={
        "replica.lag.time.max.ms": str(replica_lag_ms), **NO_PERIODIC_CHECKPOINTS, **(overrides or {})}))


def tmpfs_dir(cluster: RealKafka) -> str:
    return cluster.log_dirs[FOLLOWER][-1]


def create_decision_topic(cluster: RealKafka, topic: str, roll_every_record: bool = False) -> None:
    """The topic as `ensure_topic` makes it on 2 brokers (compacted, replication 2, min.insync.replicas 1), led by
    node 2 with node 1's replica moved to the tmpfs; returns once node 1 holds it there.

    An append fails only when it needs a new page of the tmpfs: records that fit in the last page of node 1's
    segment still succeed after the fill, and the first that does not fails with ENOSPC and takes the log dir
    offline. With `roll_every_record` (segment.ms 100: the pipeline's records come a second or more apart) every
    record starts a new segment instead, so the first record after the fill fails at once, when node 1 rolls its
    segment: Kafka 4.1 then marks node 1's replica failed ("Unexpected error ... marked as failed") and leaves the
    log dir online, so the leader, not the controller, drops node 1 from the ISR, a lag after its last fetch.
    min.compaction.lag.ms keeps the cleaner, which would also write there, off these segments."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cluster.client_config())
    config = {"cleanup.policy": "compact", "min.insync.replicas": "1"}
    if roll_every_record:
        config.update({"segment.ms": "100", "min.compaction.lag.ms": "3600000"})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[LEADER, FOLLOWER]],
                                  config=config)])[topic].result(30)
    target = tmpfs_dir(cluster)

    def placed() -> bool:
        # The move copies into "<topic>-0-future" first, which DescribeLogDirs already lists under the target:
        # only the renamed directory means the in-sync replica itself lives on the tmpfs.
        if os.path.isdir(os.path.join(target, f"{topic}-0")):
            return True
        with_admin(cluster, lambda a: a.alter_replica_log_dirs({(topic, 0, FOLLOWER): target}))
        return False
    wait_for(placed, 30, f"node {FOLLOWER}'s replica of {topic} is on its tmpfs {target}", every=0.5)


def fill(directory: str, name: str = "ballast") -> int:
    """Write a ballast file (`name`, a new one each time to top up) until the file system refuses with ENOSPC; the
    bytes written."""
    written = 0
    with open(os.path.join(directory, name), "wb", buffering=0) as fh:
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


def failure_lines(cluster: RealKafka, topic: str) -> list[str]:
    """Node 1's log lines saying why and when its tmpfs log dir failed, and both nodes' lines on the topic's
    leadership and in-sync replicas: what a test shows when the stall it waits for does not come."""
    lines = []
    for node in (FOLLOWER, LEADER):
        text = (cluster.nodes[node].logs / "server.log").read_text(errors="replace")
        lines += [f"node {node}: {line[:300]}" for line in text.splitlines()
                  if re.search(r"LogDirFailureChannel|log directory has failed|marked as failed", line)
                  or (topic in line and re.search(r"ISR|[Ll]eader", line))]
    return lines


def isr(cluster: RealKafka, topic: str) -> list[int]:
    return placement(cluster, topic)[1]


def placement(cluster: RealKafka, topic: str) -> tuple[int, list[int]]:
    """(leader, sorted in-sync replicas) of the topic's partition 0, as the cluster's metadata has them."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(cluster.client_config()).list_topics(topic, timeout=10).topics[topic]
    return meta.partitions[0].leader, sorted(meta.partitions[0].isrs)
