"""The stop that refuses writes (broker-callback/: StopAuthorizer with the quota callback) on a real Apache Kafka
broker from KAFKA_HOME.

One combined broker+controller node loads both plugins (the authorizer delegating to StandardAuthorizer with
allow.everyone.if.no.acl.found=true) and follows a decision topic on itself; the tests publish decision records
directly. At factor 0 a write is refused with TOPIC_AUTHORIZATION_FAILED and nothing is appended, the decision
topic still takes writes, a targeted stop refuses only its topics, a client id exempts nobody, and a producer's
retry is acknowledged within 2 s of the release record reaching the topic.
"""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness.kafka_client import create_topic, decision, publish, wait_until
from harness.kafka import SELF_PLAINTEXT, RealKafka, kafka_home
from tests.support.plugin_brokers import CALLBACK, callback_broker, server_log

CLUSTER = "stop-test"
DECISIONS = "__quota_throttle_factors"
AUTHORIZER = "io.quotapipeline.callback.StopAuthorizer"
PUBLISHER = "quota-pipeline-publisher"
PROBE = Path(__file__).resolve().parents[1] / "java" / "StopProbe.java"


@pytest.fixture(scope="module")
def stop_broker(callback_jar: Path) -> Iterator[RealKafka]:  # noqa: F811
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.cluster.name": CLUSTER,
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true",
            "quota.pipeline.output.kafka.bootstrap.servers": SELF_PLAINTEXT,
            # Another listener of this cluster: its decision topic, exempt from a stop.
            "quota.pipeline.output.topic.on.this.cluster": "true",
            "client.quota.callback.static.throttle.factor.validity.duration": "PT5M"}) as cluster:
        create_topic(cluster.bootstrap(), DECISIONS)
        for topic in ("data-a", "data-b", "data-c"):
            _create_data_topic(cluster.bootstrap(), topic)
        yield cluster


@pytest.fixture(scope="module")
def separate_stop_broker(callback_jar: Path, real_kafka: RealKafka) -> Iterator[RealKafka]:  # noqa: F811
    """A broker whose decision topic lives on another cluster (the session's `real_kafka`), with the default
    quota.pipeline.output.topic.on.this.cluster: a topic of the decision topic's name on this broker is anyone's."""
    from quota_pipeline.kafka.publisher import ensure_topic
    ensure_topic({"bootstrap.servers": real_kafka.bootstrap()}, DECISIONS)
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.cluster.name": CLUSTER,
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true",
            "quota.pipeline.output.kafka.bootstrap.servers": real_kafka.bootstrap(),
            "client.quota.callback.static.throttle.factor.validity.duration": "PT5M"}) as cluster:
        for topic in (DECISIONS, "data-a"):  # the first created by anyone who may create topics here
            _create_data_topic(cluster.bootstrap(), topic)
        yield cluster


def _create_data_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(10)


def publish_decision(cluster: RealKafka, factor: float, stop: Any = "absent") -> float:
    """Publishes this cluster's decision, observed now; the monotonic time at which the topic acknowledged it. Without
    `stop` it is a version 1 record (no stop field)."""
    value = decision(CLUSTER, factor, observed_at=dt.datetime.now(dt.timezone.utc)).to_json()
    value.pop("stop", None)
    if stop != "absent":
        value.update(schema_version=2, stop=stop)
    publish(cluster.bootstrap(), DECISIONS, [(CLUSTER.encode(), json.dumps(value).encode())])
    return time.monotonic()


class OneRecord:
    """A confluent-kafka producer sending one record at a time; the delivery error (None: acknowledged)."""

    def __init__(self, bootstrap: str, client_id: str = "app") -> None:
        from confluent_kafka import Producer
        self.throttles: list[float] = []
        self.raised: list[Any] = []  # errors produce() raised rather than reported
        self._client = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 0,
                                 "message.timeout.ms": 10000,
                                 "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = b"x") -> Any:
        """The delivery error, or the error produce() raised: after a refusal librdkafka marks the topic failed and
        refuses records at once (the same TOPIC_AUTHORIZATION_FAILED) until its next metadata refresh."""
        from confluent_kafka import KafkaException
        outcome: list[Any] = []
        try:
            self._client.produce(topic, key=key, value=value, on_delivery=lambda err, _msg: outcome.append(err))
        except KafkaException as exc:
            self.raised.append(exc.args[0])
            return exc.args[0]
        assert self._client.flush(15) == 0, "the record was still undelivered after 15 s"
        return outcome[0]


def end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def refused(err: Any) -> bool:
    from confluent_kafka import KafkaError
    return err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def wait_for_answer(producer: OneRecord, topic: str, want_refused: bool, timeout: float = 15.0) -> Any:
    """Sends until the broker answers as wanted (the decision reaches the broker's follower within a poll)."""
    deadline = time.monotonic() + timeout
    while True:
        err = producer.send(topic)
        if refused(err) == want_refused and (want_refused or err is None):
            return err
        assert time.monotonic() < deadline, f"{topic}: still {err} after {timeout} s"
        time.sleep(0.1)


def java_probe(bootstrap: str, topic: str, client_id: str) -> list[str]:
    done = subprocess.run(["java", "-cp", f"{kafka_home()}/libs/*", str(PROBE), bootstrap, topic, client_id],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()


def test_both_plugins_load_and_share_one_follower(stop_broker: RealKafka):
    log = server_log(stop_broker)
    assert "stop authorizer for cluster stop-test" in log
    assert "stop: refusal by io.quotapipeline.callback.StopAuthorizer: writes refused at factor 0, no client muted" \
        in log
    # A combined node loads two callbacks and two authorizers: one consumer of the decision topic for all four.
    assert f"shares the decision follower of {DECISIONS} with 3 other plugin(s)" in log
    assert log.count(f"following {DECISIONS} (") <= 1


def test_acls_reach_the_delegate_through_the_wrapper(stop_broker: RealKafka):
    """CreateAcls goes to the controller's authorizer (its ACL mutator), the ACL comes back to every authorizer
    through the metadata (addAcl), DescribeAcls lists it (acls), and the delegate applies it."""
    from confluent_kafka.admin import (
        AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
    )
    bootstrap = stop_broker.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deny = AclBinding(ResourceType.TOPIC, "data-c", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    for future in admin.create_acls([deny]).values():
        future.result(10)
    def listed() -> list:
        found = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, "data-c", ResourcePatternType.LITERAL, None,
                                                     None, AclOperation.ANY, AclPermissionType.ANY)).result(10)
        return [(b.name, b.operation, b.permission_type) for b in found]
    # The ACL travels through the metadata log: DescribeAcls right after CreateAcls may not show it yet.
    assert wait_until(listed, timeout=15.0, interval=0.2) == [("data-c", AclOperation.WRITE, AclPermissionType.DENY)]
    app = OneRecord(bootstrap)
    wait_for_answer(app, "data-c", want_refused=True)  # no stop: the delegate's ACL refuses it
    assert OneRecord(bootstrap).send("data-b") is None
    assert "[StandardAuthorizer 1] Initialized with" in server_log(stop_broker)


def test_at_factor_0_a_write_is_refused_and_nothing_appended_while_the_decision_topic_takes_writes(
        stop_broker: RealKafka):
    from confluent_kafka import KafkaError
    bootstrap = stop_broker.bootstrap()
    app = OneRecord(bootstrap)
    assert wait_for_answer(app, "data-a", want_refused=False) is None
    publish_decision(stop_broker, 0.0)  # a version 1 record: no stop field, so every topic
    wait_for_answer(app, "data-a", want_refused=True)
    before = end_offset(bootstrap, "data-a")
    err = OneRecord(bootstrap).send("data-a")
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert err.str() == "Broker: Topic authorization failed" and not err.retriable()
    assert end_offset(bootstrap, "data-a") == before, "a refused write must not be appended"
    assert OneRecord(bootstrap, "app").send(DECISIONS, key=b"another-cluster", value=None) is None
    # The Java producer: InitProducerId (idempotence) passes, the record fails in the future and the callback.
    lines = java_probe(bootstrap, "data-a", "java-app")
    assert lines[0].startswith("future error org.apache.kafka.common.errors.TopicAuthorizationException"), lines
    assert lines[1].startswith("callback error org.apache.kafka.common.errors.TopicAuthorizationException"), lines
    assert end_offset(bootstrap, "data-a") == before
    # Reads are not refused.
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("data-a", 0, 0)])
        message = consumer.poll(10)
        assert message is not None and message.error() is None
    finally:
        consumer.close()


def test_a_targeted_stop_refuses_its_topic_while_another_keeps_producing(stop_broker: RealKafka):
    bootstrap = stop_broker.bootstrap()
    app = OneRecord(bootstrap)
    publish_decision(stop_broker, 0.0, stop={"scope": "topics", "topics": ["data-a"]})
    wait_for_answer(app, "data-b", want_refused=False)
    wait_for_answer(app, "data-a", want_refused=True)
    before = end_offset(bootstrap, "data-b")
    assert [app.send("data-b") for _ in range(20)] == [None] * 20
    assert end_offset(bootstrap, "data-b") == before + 20
    assert refused(app.send("data-a"))
    # librdkafka may also refuse the next records of the refused topic itself (produce() raises the same error)
    # until it has refreshed its metadata: whether it did depends on the timing of that refresh.
    assert all(refused(e) and e.str() == "Unable to produce message: Broker: Topic authorization failed"
               for e in app.raised), app.raised


def test_a_client_named_like_the_publisher_gets_no_exemption(stop_broker: RealKafka):
    bootstrap = stop_broker.bootstrap()
    publish_decision(stop_broker, 0.0)
    wait_for_answer(OneRecord(bootstrap), "data-b", want_refused=True)
    publisher = OneRecord(bootstrap, PUBLISHER)
    assert refused(publisher.send("data-b"))
    assert publisher.send(DECISIONS, key=b"another-cluster", value=None) is None  # the topic, not the id


def test_after_the_release_a_retry_is_acknowledged_within_2_s(stop_broker: RealKafka):
    bootstrap = stop_broker.bootstrap()
    app = OneRecord(bootstrap)
    publish_decision(stop_broker, 0.0)
    wait_for_answer(app, "data-a", want_refused=True)
    released = publish_decision(stop_broker, 1.0)
    # librdkafka does not retry TOPIC_AUTHORIZATION_FAILED: the application re-produces on a delivery failure.
    while refused(err := app.send("data-a")):
        assert time.monotonic() - released < 5.0, "still refused 5 s after the release"
        time.sleep(0.02)
    assert err is None
    acknowledged = time.monotonic() - released
    print(f"stop authorizer: a retry acknowledged {acknowledged:.2f} s after the release record")
    assert acknowledged < 2.0, f"acknowledged {acknowledged:.2f} s after the release"
    assert not any(t > 0 for t in app.throttles), f"a refused producer was also muted: {app.throttles}"


def test_a_tombstone_on_the_decision_topic_does_not_lift_the_stop(stop_broker: RealKafka):
    """A tombstone has no date and any writer of the topic can write one: the broker reads it as absence, and the
    stop in force stays until its own valid_until."""
    bootstrap = stop_broker.bootstrap()
    app = OneRecord(bootstrap)
    publish_decision(stop_broker, 0.0)
    wait_for_answer(app, "data-a", want_refused=True)
    publish(bootstrap, DECISIONS, [(CLUSTER.encode(), None)])
    time.sleep(2.0)  # well past the follower's next fetch
    assert refused(app.send("data-a")), "a tombstone lifted the stop"


def test_on_a_broker_whose_decision_topic_is_elsewhere_a_topic_of_its_name_is_refused_during_a_stop(
        separate_stop_broker: RealKafka, real_kafka: RealKafka):
    """The record stops the topic named like the decision topic (as the job lists it when a full dir holds it): on
    this broker nobody writes it through the stop, whatever the client id, and the other topics keep producing."""
    bootstrap = separate_stop_broker.bootstrap()
    app = OneRecord(bootstrap, PUBLISHER)
    assert wait_for_answer(app, DECISIONS, want_refused=False) is None
    assert "topic __quota_throttle_factors (on another cluster" in server_log(separate_stop_broker)
    try:
        publish_decision(real_kafka, 0.0, stop={"scope": "topics", "topics": [DECISIONS]})
        wait_for_answer(app, DECISIONS, want_refused=True)
        before = end_offset(bootstrap, DECISIONS)
        assert refused(OneRecord(bootstrap, PUBLISHER).send(DECISIONS, key=CLUSTER.encode()))
        assert end_offset(bootstrap, DECISIONS) == before, "a refused write must not be appended"
        assert OneRecord(bootstrap).send("data-a") is None
    finally:
        publish_decision(real_kafka, 1.0)
    wait_for_answer(app, DECISIONS, want_refused=False)
