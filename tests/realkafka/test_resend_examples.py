"""The resending producers application owners are given (docs/examples/, Python and Java) against a real broker that
loads the stop: started while writes are refused, each says so and keeps its records, and after the release every
record is acknowledged and in the topic once."""
from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from harness.kafka import SELF_PLAINTEXT, RealKafka, kafka_home
from harness.kafka_client import create_topic, decision, encode, publish, wait_for
from tests.support.plugin_brokers import CALLBACK, callback_broker, server_log

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
CLUSTER = "resend-test"
DECISIONS = "__quota_throttle_factors"
COUNT = 20
REFUSED_LINE = "refused (a disk-pressure stop?): holding the records"
STOP_SEEN = re.compile(rf"decision of {CLUSTER} observed at \S+: throttle factor 0\.0 ")
SUMMARY = re.compile(r"acknowledged (\d+) of (\d+) records \((\d+) refused, (\d+) held and sent again\), 0 failed")


@pytest.fixture(scope="module")
def stop_broker(callback_jar: Path) -> Iterator[RealKafka]:  # noqa: F811
    """One node loading both plugins, its decision topic on itself, and a topic per example."""
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.cluster.name": CLUSTER,
            "authorizer.class.name": "io.quotapipeline.callback.StopAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
            "quota.pipeline.output.kafka.bootstrap.servers": SELF_PLAINTEXT,
            "quota.pipeline.output.topic.on.this.cluster": "true",
            "client.quota.callback.static.throttle.factor.validity.duration": "PT5M"}) as cluster:
        from confluent_kafka.admin import AdminClient, NewTopic
        create_topic(cluster.bootstrap(), DECISIONS)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("orders-python", "orders-java")]).values():
            future.result(10)
        yield cluster


class Example:
    """An example running in its own process; its stderr lines as they come."""

    def __init__(self, cmd: list[str]) -> None:
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.errors: list[str] = []
        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True).start()

    def said_refused(self) -> bool:
        return any(REFUSED_LINE in line for line in self.errors)

    def finish(self, timeout: float) -> tuple[int, str]:
        """Its exit code and stdout (a few lines: no pipe fills before the exit)."""
        code = self.process.wait(timeout)
        return code, self.process.stdout.read().strip()


def set_factor(cluster: RealKafka, factor: float) -> None:
    """The whole cluster's decision, observed now (no stop field: every topic is in the stop's scope)."""
    value = decision(CLUSTER, factor, observed_at=dt.datetime.now(dt.timezone.utc))
    publish(cluster.bootstrap(), DECISIONS, [(CLUSTER.encode(), encode(value))])


def end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"end-{topic}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_both_examples_resend_their_refused_records_until_each_is_acknowledged_after_the_release(
        stop_broker: RealKafka):
    bootstrap = stop_broker.bootstrap()
    set_factor(stop_broker, 0.0)
    wait_for(lambda: STOP_SEEN.search(server_log(stop_broker)), 20, "the broker holds the stop")
    examples = {
        "python": Example([sys.executable, str(EXAMPLES / "resending_producer.py"), bootstrap, "orders-python",
                           str(COUNT)]),
        "java": Example(["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                         f"{kafka_home()}/libs/*", str(EXAMPLES / "ResendingProducer.java"), bootstrap,
                         "orders-java", str(COUNT)])}
    try:
        wait_for(lambda: all(e.said_refused() for e in examples.values()), 40, "both examples met the stop",
                 every=0.2)
        set_factor(stop_broker, 1.0)
        finished = {name: e.finish(30) for name, e in examples.items()}
    finally:
        for e in examples.values():
            if e.process.poll() is None:
                e.process.kill()
    for name, (code, out) in finished.items():
        assert code == 0, f"{name}: {out}\n{''.join(examples[name].errors)[-2000:]}"
        summary = SUMMARY.search(out)
        assert summary and int(summary[1]) == int(summary[2]) == COUNT and int(summary[3]) >= 1, f"{name}: {out}"
        assert int(summary[4]) >= int(summary[3]), f"{name}: every refused record was held and sent again: {out}"
    # Every record appended once: a refused write appends nothing, so a resend is no duplicate.
    assert {t: end_offset(bootstrap, t) for t in ("orders-python", "orders-java")} == {
        "orders-python": COUNT, "orders-java": COUNT}
