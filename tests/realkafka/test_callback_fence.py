"""Kafka's KAFKA-20746 with the callback loaded, on the Kafka of KAFKA_HOME: after a broker holding replicas is
fenced (stopped) and unfenced (started), every broker's metadata is still complete, and the callback named the
defect at start on an affected version (docs/broker-side.md, "Kafka's own defect with any quota callback")."""
from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness.kafka import ClusterSpec, RealKafka, free_ports, start_cluster
from harness.kafka_process import FAST_START_JVM
from harness.kafka_props import wait_for
from harness.kafka_versions_check import FAULT, NAMED, brokers_seen
from tests.support.plugin_brokers import CALLBACK, CLUSTER

PARTITIONS = 300  # "a few hundred": Strimzi #71 lost a broker's metadata cache at about 2,000 topics on 4.2.0


@pytest.fixture(scope="module")
def cluster(callback_jar: Path) -> Iterator[RealKafka]:
    """3 combined nodes loading the callback; its decision cluster is a closed port (the follower just retries)."""
    [closed] = free_ports(1)
    overrides = {"client.quota.callback.class": CALLBACK, "quota.pipeline.cluster.name": CLUSTER,
                 "quota.pipeline.output.kafka.bootstrap.servers": f"127.0.0.1:{closed}"}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLASSPATH", str(callback_jar))  # kept while the cluster runs: a restarted node loads it again
        started = start_cluster(ClusterSpec(nodes=3, log_dirs=1, jvm_opts=FAST_START_JVM, overrides=overrides))
        try:
            yield started
        finally:
            started.stop()


def admin(cluster: RealKafka, node: int) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": cluster.bootstrap(node_ids=[node])})


def complete(cluster: RealKafka, node: int, topic: str) -> str | None:
    """None when `node` lists `topic` with a leader for every partition; else what is missing."""
    metadata = admin(cluster, node).list_topics(timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return f"node {node} does not list {topic} ({None if found is None else found.error})"
    leaderless = [p for p, info in found.partitions.items() if info.leader < 0]
    if len(found.partitions) != PARTITIONS or leaderless:
        return f"node {node}: {len(found.partitions)} partitions, {len(leaderless)} without a leader"
    return None


def produce_to_a_new_topic(cluster: RealKafka, node: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic
    topic = f"after-unfence-{node}-{uuid.uuid4().hex[:6]}"
    client = admin(cluster, node)  # kept: a collected client cancels its futures
    client.create_topics([NewTopic(topic, 3, 3)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(node_ids=[node]), "acks": "all"})
    errors: list[Any] = []
    for i in range(10):
        producer.produce(topic, f"record {i}".encode(), on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, f"node {node}: produce to {topic} failed: {errors}"


def server_log(cluster: RealKafka, node: int) -> str:
    return (cluster.nodes[node].logs / "server.log").read_text(errors="replace")


def test_every_broker_keeps_complete_metadata_after_a_fence_and_unfence(cluster: RealKafka):
    from confluent_kafka.admin import NewTopic
    topic = f"many-{uuid.uuid4().hex[:6]}"
    client = admin(cluster, 1)  # kept: a collected client cancels its futures
    client.create_topics([NewTopic(topic, PARTITIONS, 2)])[topic].result(timeout=60)
    for node in cluster.node_ids:
        wait_for(lambda: complete(cluster, node, topic) is None, timeout=60.0, what=f"node {node} sees {topic}")

    started = time.monotonic()
    cluster.stop_node(3)  # holds replicas of about two thirds of the partitions: they lose a replica, some a leader
    wait_for(lambda: 3 not in brokers_seen(cluster, 1), timeout=60.0, what="node 3 fenced")
    for node in (1, 2):
        wait_for(lambda: complete(cluster, node, topic) is None, timeout=60.0,
                 what=f"node {node}'s metadata while node 3 is fenced")
    cluster.start_node(3)
    for node in cluster.node_ids:
        wait_for(lambda: brokers_seen(cluster, node) == {1, 2, 3}, timeout=60.0, what=f"node {node} sees all nodes")
        wait_for(lambda: complete(cluster, node, topic) is None, timeout=60.0,
                 what=f"node {node}'s metadata after the unfence")
        produce_to_a_new_topic(cluster, node)
    took = time.monotonic() - started

    faults = {node: server_log(cluster, node).count(FAULT) for node in cluster.node_ids}
    version = re.search(r"Kafka version: (\S+)", server_log(cluster, 1))
    print(f"Kafka {version.group(1) if version else '?'}: '{FAULT}' lines per node after one fence and unfence "
          f"with {PARTITIONS} partitions: {faults}; fence to complete metadata everywhere {took:.1f} s")
    if version and re.fullmatch(r"4\.[01]\.\d+.*", version.group(1)):
        for node in cluster.node_ids:  # one warning per JVM start, though a combined node configures two callbacks
            starts = 2 if node == 3 else 1
            assert server_log(cluster, node).count(NAMED) == starts, f"node {node}"
