"""The broker plugins on one Kafka version: they load, a stop and a release reach a real producer, no error of ours;
and whether that version has Kafka's KAFKA-20746 with a quota callback loaded.

One combined broker+controller node loads the quota callback and the authorizer of the stop (over Kafka's
StandardAuthorizer, every client allowed) and follows a decision topic on itself. A producer's record is
acknowledged, then refused within 15 s of a factor-0 record, then acknowledged within 15 s of a 1.0 record.
KAFKA-20746 is checked on three nodes loading the callback: a broker holding replicas is fenced and unfenced, and
each node's log is searched for Kafka's metadata publishing fault.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.kafka_client import create_topic, decision, publish, wait_for
from harness.kafka import SELF_PLAINTEXT, ClusterSpec, free_ports, start_cluster
from harness.kafka_process import FAST_START_JVM, KafkaStartError

CLUSTER = "versions"
DECISIONS = "__quota_throttle_factors"
DATA = "data"
CALLBACK = "io.quotapipeline.callback.PipelineQuotaCallback"
AUTHORIZER = "io.quotapipeline.callback.StopAuthorizer"  # Kafka 4.1 and later (plugin metrics)
BASIC_AUTHORIZER = "io.quotapipeline.callback.BasicStopAuthorizer"  # before 4.1
# An error line of ours, or a stack trace through our classes.
OURS = re.compile(r"^\[[^]]+\] ERROR .*io\.quotapipeline.*$|^\s+at io\.quotapipeline.*$", re.M)
# The first exception a failed start logged: its class and message.
CAUSE = re.compile(r"^(?:Caused by: )?([\w.$]+(?:Exception|Error)\b.*)$", re.M)


@dataclass
class Outcome:
    """What one version did; `problem` is None when every step held."""

    version: str
    started: bool = False
    loaded: bool = False  # both plugins' start-up lines in server.log
    acked_before: bool = False
    refused_after_s: float | None = None
    acked_after_release_s: float | None = None
    our_log_lines: list[str] = field(default_factory=list)
    problem: str | None = None


def _send(producer: Any, topic: str) -> Any:
    """The delivery error of one record (None: acknowledged), or the error produce() raised at once."""
    from confluent_kafka import KafkaException
    outcome: list[Any] = []
    try:
        producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    except KafkaException as exc:
        return exc.args[0]
    producer.flush(15)
    return outcome[0] if outcome else "no delivery report within 15 s"


def _until(producer: Any, refused: bool, timeout: float = 15.0) -> float | None:
    """Seconds until a record is refused (or acknowledged), None if it never was within `timeout`."""
    from confluent_kafka import KafkaError
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        err = _send(producer, DATA)
        if (refused and err is not None and getattr(err, "code", lambda: None)() ==
                KafkaError.TOPIC_AUTHORIZATION_FAILED) or (not refused and err is None):
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def _plain_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the result: a collected client cancels it
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(10)


def _publish(bootstrap: str, factor: float) -> None:
    value = decision(CLUSTER, factor, observed_at=dt.datetime.now(dt.timezone.utc)).to_json()
    value["stop"] = {"scope": "cluster"} if factor == 0.0 else None
    publish(bootstrap, DECISIONS, [(CLUSTER.encode(), json.dumps(value).encode())])


def round_trip(version: str, home: Path, jar: Path) -> Outcome:
    """Start a node of `home` with the plugins of `jar`, stop and release a producer, stop the node."""
    from confluent_kafka import Producer
    outcome = Outcome(version)
    major, minor = (int(x) for x in version.split(".")[:2])
    authorizer = AUTHORIZER if (major, minor) >= (4, 1) else BASIC_AUTHORIZER
    overrides = {"client.quota.callback.class": CALLBACK, "authorizer.class.name": authorizer,
                 "allow.everyone.if.no.acl.found": "true", "quota.pipeline.cluster.name": CLUSTER,
                 "quota.pipeline.output.kafka.bootstrap.servers": SELF_PLAINTEXT,
                 "quota.pipeline.output.topic.on.this.cluster": "true",
                 "client.quota.callback.static.throttle.factor.validity.duration": "PT5M"}
    os.environ["CLASSPATH"] = str(jar)  # kafka-run-class.sh puts it before Kafka's own libs
    try:
        cluster = start_cluster(ClusterSpec(nodes=1, log_dirs=1, jvm_opts=FAST_START_JVM, overrides=overrides),
                                home)
    except KafkaStartError as exc:
        causes = CAUSE.findall(str(exc))
        outcome.problem = f"the broker did not start: {causes[-1][:300] if causes else str(exc).splitlines()[0]}"
        outcome.our_log_lines = [line.strip()[:300] for line in OURS.findall(str(exc))][:5]
        return outcome
    finally:
        del os.environ["CLASSPATH"]
    log = cluster.nodes[1].logs / "server.log"
    try:
        outcome.started = True
        bootstrap = cluster.bootstrap()
        create_topic(bootstrap, DECISIONS)
        _plain_topic(bootstrap, DATA)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 10000})
        outcome.acked_before = _until(producer, refused=False) is not None
        _publish(bootstrap, 0.0)
        outcome.refused_after_s = _until(producer, refused=True)
        _publish(bootstrap, 1.0)
        outcome.acked_after_release_s = _until(producer, refused=False)
    finally:
        text = log.read_text(errors="replace") if log.exists() else ""
        cluster.stop()
    outcome.loaded = "stop authorizer for cluster versions" in text and "throttle factor of versions" in text
    outcome.our_log_lines = [line.strip()[:300] for line in OURS.findall(text)][:5]
    outcome.problem = _problem(outcome)
    return outcome


def _problem(o: Outcome) -> str | None:
    if not o.loaded:
        return "the plugins' start-up lines are missing from server.log"
    if not o.acked_before:
        return "no record was acknowledged before the stop"
    if o.refused_after_s is None:
        return "the stop did not refuse the producer within 15 s"
    if o.acked_after_release_s is None:
        return "the producer was not acknowledged within 15 s of the release"
    if o.our_log_lines:
        return f"the broker logged {len(o.our_log_lines)} error(s) of ours"
    return None



FAULT = "Encountered metadata publishing fault"  # KRaft's line when the callback's Cluster could not be built
NAMED = "has KAFKA-20746"  # the callback's warning at start on a version it takes as affected
FENCE_PARTITIONS = 300  # a broker holding replicas of a few hundred partitions: 7-8 faults per node on 4.1.0


@dataclass
class FenceOutcome:
    """KAFKA-20746 on one version: the faults each node logged around a fence and unfence, and whether the callback
    warned at start that the version is affected."""

    version: str
    faults_by_node: dict[int, int] = field(default_factory=dict)
    named_by_callback: bool = False
    problem: str | None = None

    @property
    def affected(self) -> bool | None:
        return None if self.problem else any(self.faults_by_node.values())


def brokers_seen(cluster: Any, node: int) -> set[int]:
    """The brokers `node`'s metadata lists (a fenced broker is left out)."""
    from confluent_kafka.admin import AdminClient
    return set(AdminClient({"bootstrap.servers": cluster.bootstrap(node_ids=[node])}).list_topics(timeout=10).brokers)


def fence_faults(version: str, home: Path, jar: Path) -> FenceOutcome:
    """3 nodes of `home` loading the callback (its decision cluster a closed port: the follower only retries), a topic
    of FENCE_PARTITIONS partitions with 2 replicas; node 3 stopped until the others no longer list it, started again
    until every node lists every node; then each node's count of Kafka's metadata publishing fault."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    outcome = FenceOutcome(version)
    [closed] = free_ports(1)
    overrides = {"client.quota.callback.class": CALLBACK, "quota.pipeline.cluster.name": CLUSTER,
                 "quota.pipeline.output.kafka.bootstrap.servers": f"127.0.0.1:{closed}"}
    os.environ["CLASSPATH"] = str(jar)  # kept while the cluster runs: node 3 loads it again at its restart
    cluster = None
    try:
        cluster = start_cluster(ClusterSpec(nodes=3, log_dirs=1, jvm_opts=FAST_START_JVM, overrides=overrides), home)

        def seen(node: int) -> set[int]:
            return brokers_seen(cluster, node)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})  # held until the result
        admin.create_topics([NewTopic("many", FENCE_PARTITIONS, 2)])["many"].result(timeout=60)
        cluster.stop_node(3)
        wait_for(lambda: 3 not in seen(1), timeout=60.0, what="node 3 fenced")
        cluster.start_node(3)
        for node in cluster.node_ids:
            wait_for(lambda: seen(node) == {1, 2, 3}, timeout=60.0, what=f"node {node} sees every node")
        time.sleep(2)  # the publishers' last updates
        logs = {n: (cluster.nodes[n].logs / "server.log").read_text(errors="replace") for n in cluster.node_ids}
        outcome.faults_by_node = {n: text.count(FAULT) for n, text in logs.items()}
        outcome.named_by_callback = any(NAMED in text for text in logs.values())
    except (KafkaStartError, KafkaException, AssertionError) as exc:
        outcome.problem = f"the fence check did not run through: {str(exc).splitlines()[0][:300]}"
    finally:
        del os.environ["CLASSPATH"]
        if cluster is not None:
            cluster.stop()
    return outcome
