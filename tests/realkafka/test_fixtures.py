"""The real-Kafka fixtures deliver what tests rely on, checked with raw clients (kafka-python, confluent-kafka)."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.kafka import RealKafka, with_admin
from tests.support.realkafka_fixtures import TMPFS_MB

KAFKA_STORAGE_ERROR = 56


def _errors_of(conf: dict, timeout: float = 15.0) -> list[KafkaError]:
    """The client-level errors librdkafka reports before a metadata request with `conf` works (empty if it works)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + timeout
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return []
        except Exception:  # the errors collected by error_cb say why
            admin.poll(0.1)
    return errors


def test_one_node_cluster_describes_node_1_and_both_log_dirs(real_kafka: RealKafka):
    cluster = with_admin(real_kafka, lambda a: a.describe_cluster())
    assert [(b["broker_id"], b["is_fenced"]) for b in cluster["brokers"]] == [(1, False)]
    [broker] = with_admin(real_kafka, lambda a: a.describe_log_dirs())
    dirs = {d["log_dir"]: d for d in broker["log_dirs"]}
    assert broker["broker"] == 1 and set(dirs) == set(real_kafka.log_dirs[1]) and len(dirs) == 2
    for d in dirs.values():
        assert d["error_code"] == 0 and d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]


def test_scram_login_needs_the_right_password(real_kafka: RealKafka):
    if real_kafka.version < (3, 5):
        pytest.skip("SCRAM users in KRaft mode need Kafka 3.5 (KIP-900)")
    good = AdminClient({**real_kafka.client_config("SASL_PLAINTEXT"), "log_level": 0})
    assert set(good.list_topics(timeout=10).brokers) == {1}
    errors = _errors_of(real_kafka.client_config("SASL_PLAINTEXT", password="wrong"))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_ssl_is_verified_against_the_test_ca(real_kafka: RealKafka):
    conf = real_kafka.client_config("SSL")
    assert _errors_of(conf) == []
    without_ca = {k: v for k, v in conf.items() if k != "ssl.ca.location"}
    errors = _errors_of({**without_ca, "ssl.ca.location": "probe"})
    assert any(e.code() == KafkaError._SSL for e in errors), errors


def test_a_record_written_over_ssl_is_read_over_scram(real_kafka: RealKafka):
    topic = f"listeners-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(real_kafka.client_config())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    try:
        producer = Producer({**real_kafka.client_config("SSL"), "linger.ms": 0})
        producer.produce(topic, key=b"k", value=b"over ssl")
        assert producer.flush(20) == 0
        consumer = Consumer({**real_kafka.client_config("SASL_PLAINTEXT"), "group.id": topic,
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(20)
        consumer.close()
        assert message is not None and message.error() is None and message.value() == b"over ssl"
    finally:
        admin.delete_topics([topic])[topic].result(30)


def test_cleanly_stopped_node_is_reported_fenced_and_comes_back(real_kafka3: RealKafka):
    if real_kafka3.version < (4, 0):
        pytest.skip("DescribeCluster reports fenced brokers from Kafka 4.0 (KIP-1073)")

    def fenced() -> dict[int, bool]:
        brokers = with_admin(real_kafka3, lambda a: a.describe_cluster())["brokers"]
        return {b["broker_id"]: b["is_fenced"] for b in brokers}

    assert fenced() == {1: False, 2: False, 3: False}
    real_kafka3.stop_node(3)
    try:
        assert fenced() == {1: False, 2: False, 3: True}
    finally:
        real_kafka3.start_node(3)
    assert fenced() == {1: False, 2: False, 3: False}


def _wait_placed(cluster: RealKafka, partitions: int, timeout: float = 20.0) -> dict[str, list[int]]:
    """Partition numbers per log dir of node 1, once `partitions` replicas exist (or as they are at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        [broker] = with_admin(cluster, lambda a: a.describe_log_dirs())
        placed = {d["log_dir"]: [p["partition_index"] for t in d["topics"] for p in t["partitions"]]
                  for d in broker["log_dirs"]}
        if sum(map(len, placed.values())) >= partitions or time.monotonic() > deadline:
            return placed
        time.sleep(0.2)


def _wait_offline(cluster: RealKafka, log_dir: str, timeout: float = 20.0) -> dict[str, dict]:
    """The broker's log dirs by path once `log_dir` reports an error (or as they are at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        [broker] = with_admin(cluster, lambda a: a.describe_log_dirs())
        dirs = {d["log_dir"]: d for d in broker["log_dirs"]}
        if dirs[log_dir]["error_code"] != 0 or time.monotonic() > deadline:
            return dirs
        time.sleep(0.5)


def _fill(cluster: RealKafka, topic: str, partition: int, log_dir: str, timeout: float = 60.0) -> int:
    """Write 256 KiB records to `partition` until `log_dir` reports an error; return the bytes acknowledged."""
    acked = [0]

    def delivered(err, msg) -> None:
        if err is None:
            acked[0] += len(msg.value())
    producer = Producer({**cluster.client_config(), "acks": 1, "linger.ms": 5, "message.timeout.ms": 5000})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _ in range(32):
            producer.produce(topic, value=bytes(256 * 1024), partition=partition, on_delivery=delivered)
        producer.flush(2)
        [broker] = with_admin(cluster, lambda a: a.describe_log_dirs())
        if any(d["log_dir"] == log_dir and d["error_code"] for d in broker["log_dirs"]):
            break
    producer.purge()
    producer.flush(0)
    return acked[0]


def test_full_tmpfs_log_dir_goes_offline_while_the_broker_stays_up(real_kafka_tmpfs: RealKafka):
    cluster = real_kafka_tmpfs
    tmpfs_dir = cluster.log_dirs[1][-1]
    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic("fill", 4, 1)])["fill"].result(30)
    placed = _wait_placed(cluster, partitions=4)
    assert placed[tmpfs_dir], f"no partition of 'fill' was placed on {tmpfs_dir}: {placed}"
    on_tmpfs = placed[tmpfs_dir]
    acked = _fill(cluster, "fill", on_tmpfs[0], tmpfs_dir)
    # Most of the 64 MiB was accepted before the writes failed: the dir went offline because it was full.
    assert acked > TMPFS_MB * 2**20 // 2, acked
    dirs = _wait_offline(cluster, tmpfs_dir)
    assert (dirs[tmpfs_dir]["error_code"], dirs[tmpfs_dir]["total_bytes"], dirs[tmpfs_dir]["usable_bytes"]) == \
        (KAFKA_STORAGE_ERROR, -1, -1)
    healthy = dirs[cluster.log_dirs[1][0]]
    assert healthy["error_code"] == 0 and healthy["total_bytes"] > 0
    assert cluster.nodes[1].running()
    brokers = with_admin(cluster, lambda a: a.describe_cluster())["brokers"]
    assert [(b["broker_id"], b["is_fenced"]) for b in brokers] == [(1, False)]


def test_a_node_whose_port_was_taken_is_started_again_on_new_ports(monkeypatch):
    """On a busy machine another process can bind a port between our choice and the node's start: the fixture
    says so and starts the cluster again on new ports instead of failing the test that asked for it."""
    import socket

    from harness import kafka as rk
    from harness.kafka_process import FAST_START_JVM
    try:
        rk.kafka_home()
    except rk.KafkaUnavailable as exc:
        pytest.skip(str(exc))
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    chosen: list[list[int]] = []
    real_free_ports = rk.free_ports

    def first_one_taken(count: int) -> list[int]:
        ports = real_free_ports(count)
        if not chosen:
            ports[0] = taken  # node 1's first listener
        chosen.append(ports)
        return ports

    monkeypatch.setattr(rk, "free_ports", first_one_taken)
    try:
        cluster = rk.start_cluster(rk.ClusterSpec(nodes=1, log_dirs=1, jvm_opts=FAST_START_JVM))
    finally:
        squatter.close()
    try:
        assert len(chosen) == 2 and taken not in cluster.nodes[1].layout.ports.values()
        assert with_admin(cluster, lambda a: a.describe_cluster())["brokers"][0]["broker_id"] == 1
    finally:
        cluster.stop()


@pytest.mark.parametrize(("log", "code", "reason"), [
    ("org.apache.kafka.common.KafkaException: Socket server failed to bind to 127.0.0.1:1: Address already in use",
     1, "ports was taken"),
    ("There is insufficient memory for the Java Runtime Environment to continue.", 1, "short of memory"),
    ("java.lang.OutOfMemoryError: Java heap space", 1, "ran out of heap"),
    ("", -9, "SIGKILL"),
    ("something else", 3, "exit code 3"),
])
def test_why_a_node_died_is_said_in_words(log, code, reason):
    from harness.kafka_process import why_exited
    assert reason in why_exited(log, code)
