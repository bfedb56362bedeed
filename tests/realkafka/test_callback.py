"""The Java quota callback (broker-callback/) on a real Apache Kafka broker from KAFKA_HOME.

A broker whose decision cluster is down, or whose decision topic does not exist yet, starts and serves produce
requests; once a decision appears it throttles clients (a client id exempts nobody: a client chooses its own), and
lifts.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness.kafka_client import create_topic, decision, encode, publish
from harness.kafka import RealKafka, free_ports, partition_on
from harness.paced_producer import first_window, window_starts
from harness.kafka_props import wait_for
from tests.support.plugin_brokers import CALLBACK, CLUSTER, MONITORABLE, callback_broker, jmx_value, server_log

PUBLISHER = "quota-pipeline-publisher"


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
        self.throttles: list[float] = []  # seconds (confluent_kafka's ThrottleEvent.throttle_time)
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


def test_a_published_decision_throttles_clients_even_one_with_the_publishers_id_and_a_release_lifts_it(
        broker_following_another_cluster: RealKafka, real_kafka: RealKafka, decision_topic: str, jmx_port: int):
    cluster = broker_following_another_cluster
    create_topic(real_kafka.bootstrap(), decision_topic)
    observed = dt.datetime.now(dt.timezone.utc)
    publish(real_kafka.bootstrap(), decision_topic, [(CLUSTER.encode(), encode(decision(CLUSTER, 0.0, observed)))])

    app = wait_for(lambda: _throttled_producer(cluster), timeout=30.0, what="a client is throttled at factor 0")
    assert not app.errors
    assert jmx_value(cluster, jmx_port, "io.quotapipeline.callback:type=PipelineQuotaCallback,name=ThrottleFactor",
                     "Value") == 0.0
    # A combined broker+controller node configures two callbacks; they share one consumer of the decision topic.
    log = server_log(cluster)
    assert log.count(f"following {decision_topic} (") == 1, "one decision follower per broker process"
    assert f"shares the decision follower of {decision_topic} with 1 other callback(s) of this JVM" in log

    publisher = Producer(cluster.bootstrap(), PUBLISHER)
    publisher.send("orders", count=20, size=32 * 1024)  # above its own stop limit, 1 MiB / 42 s, over 10 s
    assert publisher.throttled, "a client that names itself the pipeline's publisher is throttled like any client"

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


# ---- end to end: the streaming job decides, the callback on the observed broker throttles a real producer ----

MiB = 1024 * 1024
E2E_INTERVAL_S = 2
E2E_RATE = 2_000_000  # bytes/s each paced producer offers
E2E_MAX_MUTE_S = 32  # quota.pipeline.throttle.max.mute: each client's stop limit 1 MiB / 42 s, 1.2 % of E2E_RATE
HARD_LIMIT = 24 * MiB  # free bytes below which the tmpfs log dir violates


@pytest.fixture(scope="module")
def end_to_end(callback_jar: Path, real_kafka: RealKafka, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """`quota-pipeline run` observes a broker that loads the callback; its decisions go to a topic on the session's
    `real_kafka`, which the callback follows. A paced producer, and one whose principal is excluded (SCRAM over the
    SASL listener), produce while a 64 MiB tmpfs log dir is filled past the hard limit and freed again; then the
    decision topic is deleted."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from quota_pipeline.core import config as cfg
    from harness import kafka_config as rc
    from harness.paced_producer import PacedProducer
    from harness.kafka_props import pipeline_properties, prefixed, client_properties, write_properties
    from harness.stream_job import TopicWatcher, start_job

    work = tmp_path_factory.mktemp("callback-e2e")
    topic = f"decisions-e2e-{uuid.uuid4().hex[:8]}"
    events: dict[str, Any] = {}
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.output.kafka.bootstrap.servers": real_kafka.bootstrap(),
            "quota.pipeline.output.topic": topic,
            "quota.pipeline.throttle.max.mute": f"PT{E2E_MAX_MUTE_S}S",
            "client.quota.callback.static.excluded.principal.name.list": f"User:{real_kafka.scram_user}"},
            tmpfs_mb=64) as cluster:
        tmpfs_dir = events["tmpfs_dir"] = cluster.log_dirs[1][-1]
        disk_dir = cluster.log_dirs[1][0]
        admin = AdminClient(cluster.client_config())
        admin.create_topics([NewTopic("load", 4, 1)])["load"].result(30)
        partition = partition_on(cluster, "load", disk_dir)  # the load must not fill the tmpfs itself
        props = pipeline_properties(cluster, **{
            cfg.HARD_BYTES: str(HARD_LIMIT), cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: topic,
            cfg.CHECK_INTERVAL_SECONDS: str(E2E_INTERVAL_S), cfg.CHECKPOINT_PATH: str(work / "checkpoint")},
            **prefixed(cfg.OUTPUT_KAFKA_PREFIX, client_properties(real_kafka)))
        conf = write_properties(work / "cluster.properties", props)
        watcher = TopicWatcher(real_kafka.bootstrap(), topic)
        job = start_job(conf, work / "job.log")
        app = excluded = None
        try:
            watcher.wait_for(lambda r: r["throttle_factor"] == 1.0, timeout=300)  # a first batch takes 90 s at load 15
            app = PacedProducer(cluster.client_config(), "load", "app", E2E_RATE, partition).start()
            excluded = PacedProducer(cluster.client_config(rc.SASL), "load", "ops", E2E_RATE, partition).start()
            events["pre"] = (app.paced_rate(), excluded.paced_rate())

            ballast = os.path.join(tmpfs_dir, "ballast")
            free = os.statvfs(tmpfs_dir).f_bavail * os.statvfs(tmpfs_dir).f_frsize
            filled_at = time.monotonic()
            with open(ballast, "wb") as fh:
                fh.write(bytes(max(0, free - HARD_LIMIT // 2)))
            since = len(watcher.records)
            _, stop = watcher.wait_for(lambda r: r["throttle_factor"] == 0.0, timeout=30, since=since)
            events["stop_record"] = stop
            deadline = filled_at + E2E_INTERVAL_S + 5
            events["throttled_after"] = _first_below(app, filled_at, deadline + 5, 0.05 * events["pre"][0])
            time.sleep(max(0.0, filled_at + 20 - time.monotonic()))
            now = time.monotonic()
            events["during"] = (app.rate_between(now - 8, now), excluded.rate_between(now - 8, now))

            os.remove(ballast)
            since = len(watcher.records)
            released_wall, _ = watcher.wait_for(lambda r: r["throttle_factor"] == 1.0, timeout=30, since=since)
            released_at = time.monotonic() - (time.time() - released_wall)
            events["recovered_after"] = _first_at_least(app, released_at, released_at + E2E_MAX_MUTE_S + 3,
                                                        0.5 * events["pre"][0])
            events["max_throttle_s"] = max((s for _, s in app.throttles), default=0.0)

            admin_decisions = AdminClient(real_kafka.client_config())
            admin_decisions.delete_topics([topic])[topic].result(30)
            time.sleep(3)
            late = Producer(cluster.bootstrap(), "late")
            late.send("load", count=20, size=1024)
            events["after_topic_deleted"] = (late.delivered, late.errors)
            print(f"callback end to end: before {events['pre'][0]:.0f} B/s, below 5 % {events['throttled_after']} s "
                  f"after the fill, {events['during'][0]:.0f} B/s throttled, excluded principal "
                  f"{events['during'][1]:.0f} B/s, back at half {events['recovered_after']} s after the release "
                  f"record, largest throttle {events['max_throttle_s']:.1f} s")
            yield events
        finally:
            for producer in (app, excluded):
                if producer is not None:
                    producer.stop()
            job.terminate()
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, 9)
                job.wait(10)
            watcher.close()


def _first_below(producer, since: float, until: float, rate: float) -> float | None:
    """Seconds from `since` to the end of the first 1-s window whose rate, and every later one's, is below `rate`
    (waits until `until`)."""
    time.sleep(max(0.0, until - time.monotonic()))
    return first_window(since, until, lambda a, _: all(producer.rate_between(x, x + 1.0) < rate
                                                       for x in window_starts(a, until - 1.0)))


def _first_at_least(producer, since: float, until: float, rate: float) -> float | None:
    """Seconds from `since` to the end of the first 1-s window at `rate` or more (waits until `until`)."""
    time.sleep(max(0.0, until - time.monotonic()))
    return first_window(since, until, lambda a, b: producer.rate_between(a, b) >= rate)


def test_end_to_end_a_filling_log_dir_throttles_a_producer_within_the_interval_plus_5_s(end_to_end):
    pre = end_to_end["pre"][0]
    assert pre > 0.8 * E2E_RATE, f"the producer did not reach its pace before the fill: {pre:.0f} B/s"
    assert end_to_end["throttled_after"] is not None, f"still {end_to_end['during'][0]:.0f} B/s while throttled"
    assert end_to_end["throttled_after"] <= E2E_INTERVAL_S + 5
    assert end_to_end["stop_record"]["worst_volume"]["log_dir"] == end_to_end["tmpfs_dir"]


def test_end_to_end_an_excluded_principal_keeps_producing_at_full_rate(end_to_end):
    pre, during = end_to_end["pre"][1], end_to_end["during"][1]
    assert during > 0.8 * pre, f"excluded principal: {during:.0f} B/s while others are throttled, {pre:.0f} before"


def test_end_to_end_the_producer_is_back_at_half_its_rate_within_the_max_mute_plus_2_s_of_the_release(end_to_end):
    recovered = end_to_end["recovered_after"]
    assert recovered is not None and recovered <= E2E_MAX_MUTE_S + 2, (
        f"not at half its former rate within {E2E_MAX_MUTE_S + 2} s of the release record; largest throttle time "
        f"{end_to_end['max_throttle_s']:.1f} s")


def test_end_to_end_the_broker_keeps_serving_when_the_decision_topic_is_deleted(end_to_end):
    delivered, errors = end_to_end["after_topic_deleted"]
    assert delivered == 20 and not errors
