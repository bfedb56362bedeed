"""The Java quota callback (broker-callback/) on a real Apache Kafka broker from KAFKA_HOME.

A broker whose decision cluster is down, or whose decision topic does not exist yet, starts and serves produce
requests; once a decision appears it throttles clients, never the pipeline's own producer, and lifts.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.kafka_fixtures import create_topic, decision, encode, publish
from tests.realkafka import ClusterSpec, KafkaUnavailable, RealKafka, free_ports, kafka_home, start_cluster
from tests.realkafka_props import wait_for
from tests.realkafka_process import FAST_START_JVM

pytestmark = pytest.mark.realkafka

MODULE = Path(__file__).resolve().parent.parent / "broker-callback"
CLUSTER = "callback-test"
PUBLISHER = "quota-pipeline-publisher"
CALLBACK = "io.quotapipeline.callback.PipelineQuotaCallback"
MONITORABLE = "io.quotapipeline.callback.MonitorablePipelineQuotaCallback"


@pytest.fixture(scope="module")
def callback_jar() -> Path:
    """The callback jar, built by Maven as a user would (mvn -q -f broker-callback package -DskipTests)."""
    try:
        kafka_home()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    try:
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(MODULE), "package", "-DskipTests"],
                              capture_output=True, text=True, timeout=600)
    except FileNotFoundError:
        pytest.skip("Maven (mvn) is needed to build broker-callback/; install maven or put mvn on PATH")
    assert done.returncode == 0, f"mvn package failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    jars = [j for j in (MODULE / "target").glob("quota-pipeline-broker-callback-*.jar")
            if not j.name.endswith(("-sources.jar", "-javadoc.jar"))]
    assert len(jars) == 1, jars
    return jars[0]


@contextmanager
def callback_broker(jar: Path, callback_class: str, settings: dict[str, str],
                    jmx_port: int | None = None) -> Iterator[RealKafka]:
    """A 1-node cluster whose broker loads the callback from `jar` (CLASSPATH), always stopped afterwards."""
    overrides = {"client.quota.callback.class": callback_class, "quota.pipeline.cluster.name": CLUSTER, **settings}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLASSPATH", str(jar))  # kafka-run-class.sh puts it before Kafka's own libs
        if jmx_port is not None:
            env.setenv("JMX_PORT", str(jmx_port))
        cluster = start_cluster(ClusterSpec(nodes=1, log_dirs=1, jvm_opts=FAST_START_JVM, overrides=overrides))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def broker_with_its_decision_cluster_down(callback_jar: Path) -> Iterator[RealKafka]:
    [closed_port] = free_ports(1)
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.output.kafka.bootstrap.servers": f"127.0.0.1:{closed_port}",
            "client.quota.callback.static.produce": "1048576"}) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def decision_topic() -> str:
    return f"decisions-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def jmx_port() -> int:
    return free_ports(1)[0]


@pytest.fixture(scope="module")
def broker_following_another_cluster(callback_jar: Path, real_kafka: RealKafka, decision_topic: str,
                                     jmx_port: int) -> Iterator[RealKafka]:
    """The decisions live on the session's `real_kafka` cluster, in a topic that does not exist yet."""
    with callback_broker(callback_jar, MONITORABLE, {
            "quota.pipeline.output.kafka.bootstrap.servers": real_kafka.bootstrap(),
            "quota.pipeline.output.topic": decision_topic}, jmx_port=jmx_port) as cluster:
        yield cluster


class Producer:
    """A confluent-kafka producer that records the broker's throttle times and its delivery errors."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        from confluent_kafka import Producer as Client
        self.throttles: list[int] = []
        self.errors: list[Any] = []
        self.delivered = 0
        self._client = Client({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 0,
                               "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})

    def _report(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(err)

    def send(self, topic: str, count: int, size: int, timeout: float = 30.0) -> float:
        """Produce `count` records of `size` bytes and wait for every delivery; the seconds it took."""
        started = time.monotonic()
        for _ in range(count):
            self._client.produce(topic, value=b"x" * size, on_delivery=self._report)
        assert self._client.flush(timeout) == 0, "records were still undelivered after the flush timeout"
        return time.monotonic() - started

    @property
    def throttled(self) -> bool:
        return any(t > 0 for t in self.throttles)


def server_log(cluster: RealKafka) -> str:
    return (cluster.nodes[1].logs / "server.log").read_text(errors="replace")


def test_a_broker_whose_decision_cluster_is_down_starts_and_accepts_produce_requests(
        broker_with_its_decision_cluster_down: RealKafka):
    cluster = broker_with_its_decision_cluster_down
    producer = Producer(cluster.bootstrap(), "app")
    producer.send("orders", count=50, size=1024)
    assert producer.delivered == 50 and not producer.errors
    assert not producer.throttled, "1 MiB/s static quota at factor 1.0: 50 KiB must pass unthrottled"
    assert f"quota callback for cluster {CLUSTER}" in server_log(cluster), "the broker did not load the callback"


def test_a_broker_whose_decision_topic_does_not_exist_starts_and_accepts_produce_requests(
        broker_following_another_cluster: RealKafka, decision_topic: str):
    cluster = broker_following_another_cluster
    producer = Producer(cluster.bootstrap(), "app")
    producer.send("orders", count=50, size=1024)
    assert producer.delivered == 50 and not producer.errors and not producer.throttled
    assert f"quota callback for cluster {CLUSTER}" in server_log(cluster)
    wait_for(lambda: f"cannot follow {decision_topic} yet (the topic does not exist yet)" in server_log(cluster),
             timeout=15.0, what="the callback says it waits for its topic")


def test_a_published_decision_throttles_clients_but_not_the_publisher_and_a_release_lifts_it(
        broker_following_another_cluster: RealKafka, real_kafka: RealKafka, decision_topic: str, jmx_port: int):
    cluster = broker_following_another_cluster
    create_topic(real_kafka.bootstrap(), decision_topic)
    observed = dt.datetime.now(dt.timezone.utc)
    publish(real_kafka.bootstrap(), decision_topic, [(CLUSTER.encode(), encode(decision(CLUSTER, 0.0, observed)))])

    app = wait_for(lambda: _throttled_producer(cluster), timeout=30.0, what="a client is throttled at factor 0")
    assert not app.errors
    assert jmx_value(cluster, jmx_port, "io.quotapipeline.callback:type=PipelineQuotaCallback,name=ThrottleFactor",
                     "Value") == 0.0

    publisher = Producer(cluster.bootstrap(), PUBLISHER)
    publisher.send("orders", count=3, size=32 * 1024)
    assert not publisher.throttled, f"the publisher's client id must be exempt; throttled {publisher.throttles} ms"

    released = decision(CLUSTER, 1.0, observed + dt.timedelta(seconds=1))
    publish(real_kafka.bootstrap(), decision_topic, [(CLUSTER.encode(), encode(released))])
    wait_for(lambda: _unthrottled_producer(cluster), timeout=30.0, what="the release lifts the throttle")


def _throttled_producer(cluster: RealKafka) -> Producer | None:
    producer = Producer(cluster.bootstrap(), "app")
    producer.send("orders", count=2, size=32 * 1024)
    return producer if producer.throttled else None


def _unthrottled_producer(cluster: RealKafka) -> Producer | None:
    producer = Producer(cluster.bootstrap(), "app")
    took = producer.send("orders", count=20, size=32 * 1024)
    return producer if not producer.throttled and took < 5.0 else None


def jmx_value(cluster: RealKafka, port: int, name: str, attribute: str) -> float:
    """One attribute of one MBean of the broker, read with Kafka's own JmxTool."""
    env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "CLASSPATH")}
    env.update(KAFKA_HEAP_OPTS="-Xmx64m", LOG_DIR=str(cluster.root / "jmxtool-logs"),
               KAFKA_JVM_PERFORMANCE_OPTS=FAST_START_JVM)
    done = subprocess.run([str(cluster.home / "bin" / "kafka-run-class.sh"), "org.apache.kafka.tools.JmxTool",
                           "--jmx-url", f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi",
                           "--object-name", name, "--attributes", attribute, "--one-time", "true",
                           "--report-format", "properties"], env=env, capture_output=True, text=True, timeout=60)
    prefix = f"{name}:{attribute}="
    for line in done.stdout.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    raise AssertionError(f"JmxTool did not report {name}:{attribute}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
