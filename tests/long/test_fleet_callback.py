"""What a stop admits through the Java quota callback on a real broker, from a fleet of producers in their own
processes (librdkafka and Java, one client id each), and when each is back after the release.

quota.pipeline.throttle.max.mute=PT32S (the shortest setting, to keep the test short): each client's stop limit is
1 MiB / (32 s + 10 s); a librdkafka client gets about one request (up to 1 MB) through per 32 s, a Java client
(10 kB records in 16 KiB batches) is held to the limit itself; every client's first record after the release is
acknowledged within 32 + 2 s. The factor is driven by publishing decisions as the pipeline's publisher does.
"""
from __future__ import annotations

import datetime as dt
import shutil
import re
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quota_pipeline.core.stop import StopLimit
from harness.kafka import RealKafka, kafka_home
from harness.kafka_process import log_lines
from harness.producers import all_producing, compile_java, start_fleet, stop_outcome
from harness.kafka_props import publish_decisions, wait_for
from tests.support.plugin_brokers import CALLBACK, callback_broker

CLUSTER = "callback-test"  # the cluster name callback_broker gives the broker
MAX_MUTE_S = 32
STOP = StopLimit(max_mute_seconds=MAX_MUTE_S)
LIBRDKAFKA, JAVA = 8, 4
PRODUCE = 8 * 1_048_576  # bytes/s at factor 1.0, shared by the clients as in Strimzi (static.produce)
STOP_S = MAX_MUTE_S + 8  # the stop lasts long enough for a second request of every librdkafka client
SLACK = 1.25  # the bound: 1.25 x N x S / M


def applied_at(cluster: RealKafka, factor: str, after: float) -> float | None:
    """Wall time of the broker's log line saying the factor became `factor`, the first after `after`."""
    said = re.compile(re.escape(f"throttle factor of {CLUSTER} is now {factor} "))
    return next((t for t, _ in log_lines(cluster.nodes[1].logs, said, after)), None)


@pytest.fixture(scope="module")
def fleet_stop(callback_jar: Path, real_kafka: RealKafka, tmp_path_factory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("fleet-callback")
    topic = f"decisions-fleet-{uuid.uuid4().hex[:8]}"
    if shutil.which("javac") is None:
        pytest.skip("javac (a JDK) is needed to compile harness/ThrottleProducer.java")
    classes = compile_java(kafka_home(), work)
    decisions_admin = AdminClient(real_kafka.client_config())  # kept: a destroyed handle fails its futures
    decisions_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    publish_decisions(real_kafka, topic, [(CLUSTER, 1.0, dt.datetime.now(dt.timezone.utc))])
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.output.kafka.bootstrap.servers": real_kafka.bootstrap(),
            "quota.pipeline.output.topic": topic,
            "quota.pipeline.throttle.max.mute": f"PT{MAX_MUTE_S}S",
            "client.quota.callback.static.produce": str(PRODUCE)}) as cluster:
        admin = AdminClient(cluster.client_config())
        admin.create_topics([NewTopic("load", 1, 1)])["load"].result(30)
        clients = start_fleet(kafka_home(), classes, cluster.bootstrap(), "load", LIBRDKAFKA, JAVA, seconds=240)
        try:
            wait_for(lambda: all_producing(clients, 200_000), 90, "every producer has 200 kB acknowledged")
            before = time.time()
            time.sleep(3)
            pre_rate = sum(c.between(before, time.time()) for c in clients) / (time.time() - before)
            published = time.time()
            publish_decisions(real_kafka, topic, [(CLUSTER, 0.0, dt.datetime.now(dt.timezone.utc))])
            stopped = wait_for(lambda: applied_at(cluster, "0.0", published - 1), 20, "the broker applies 0.0")
            time.sleep(max(0.0, stopped + STOP_S - time.time()))
            release = time.time()
            publish_decisions(real_kafka, topic, [(CLUSTER, 1.0, dt.datetime.now(dt.timezone.utc))])
            released = wait_for(lambda: applied_at(cluster, "1.0", stopped), 20, "the broker applies 1.0")
            result = stop_outcome(clients, pre_rate, published, stopped, release, released, MAX_MUTE_S)
            _print(result)
            yield result
        finally:
            for c in clients:
                c.stop()


def _print(r: dict[str, Any]) -> None:
    total = sum(o.admitted for o in r["clients"])
    print(f"\ncallback fleet at max mute PT{MAX_MUTE_S}S: before {r['pre_rate']:.0f} B/s in all; decision at the "
          f"broker {r['seen_after']:.2f} s after publishing; {total} bytes admitted over "
          f"{r['released'] - r['stopped']:.1f} s of stop; the 1.0 at the broker {r['release_seen_after']:.2f} s after "
          "publishing")
    for o in r["clients"]:
        print(f"  {o.client_id}: admitted {o.admitted} B, largest response {o.largest_burst} B, steady "
              f"{o.rate:.0f} B/s, back {o.back_after if o.back_after is None else round(o.back_after, 2)} s")


def bound(o) -> float:
    """1.25 x S / M for a librdkafka client (S: its largest request in the stop); 1.25 x the limit for Java."""
    if o.kind == "java":
        return SLACK * STOP.limit(float("inf"))
    return SLACK * o.largest_burst / MAX_MUTE_S


def test_every_producer_was_producing_before_the_stop(fleet_stop):
    assert fleet_stop["pre_rate"] > 0.3 * PRODUCE, fleet_stop["pre_rate"]


def test_a_stop_admits_at_most_1_25_x_n_x_s_over_m_from_the_fleet(fleet_stop):
    clients = fleet_stop["clients"]
    rd = [o for o in clients if o.kind == "librdkafka"]
    assert all(o.largest_burst > 100_000 for o in rd), "librdkafka sends large requests when its queue is full"
    total, limit = sum(o.rate for o in clients), sum(bound(o) for o in clients)
    assert total <= limit, f"{total:.0f} B/s admitted in the stop, bound {limit:.0f}"
    over = [(o.client_id, round(o.rate), round(bound(o))) for o in clients if o.rate > bound(o)]
    assert not over, f"clients over their bound (id, B/s, bound): {over}"


def test_every_client_is_back_within_the_max_mute_plus_2_s_of_the_release(fleet_stop):
    late = [(o.client_id, o.back_after) for o in fleet_stop["clients"]
            if o.back_after is None or o.back_after > MAX_MUTE_S + 2]
    assert not late, f"not back within {MAX_MUTE_S + 2} s of the release: {late}"
