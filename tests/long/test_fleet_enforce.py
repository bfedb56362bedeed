"""What a stop admits through `quota-pipeline enforce` (client quotas, no callback) on a real broker, from a fleet of
producers in their own processes (librdkafka and Java, one client id each), and when each is back after the release.

quota.pipeline.throttle.max.mute=PT32S: at factor 0 the enforcer puts each client on 1 MiB / (32 s + 10 s) on a new
quota window (`user=<default>, client-id=<default>`); a librdkafka client gets about one request (up to 1 MB) through
per 32 s, a Java client is held to that quota itself; every client's first record after the release is acknowledged
within 32 + 2 s. The operator's quota (`client-id=<default>`, 512 KiB/s) is what they produce at before.
"""
from __future__ import annotations

import datetime as dt
import shutil
import threading
import time
import uuid
from typing import Any, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quota_pipeline.cli import build_parser
from quota_pipeline.commands import enforce
from quota_pipeline.core import config as cfg
from quota_pipeline.enforce.plan import CATCH_ALL, FRESH_DEFAULT, throttle_floor
from quota_pipeline.core.stop import StopLimit
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE
from quota_pipeline.kafka.publisher import ensure_topic
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin
from harness.kafka import RealKafka, kafka_home
from harness.producers import all_producing, compile_java, start_fleet, stop_outcome
from harness.kafka_props import (
    client_properties, pipeline_properties, publish_decisions, restore_quotas, wait_for, write_properties,
)

CLUSTER = "enforce-fleet"
MAX_MUTE_S = 32
FLOOR = throttle_floor(StopLimit(max_mute_seconds=MAX_MUTE_S))
LIBRDKAFKA, JAVA = 8, 4
PRODUCE = 524_288.0  # the operator's client-id=<default> quota: bytes/s per client before the stop
STOP_S = MAX_MUTE_S + 8
SLACK = 1.25


@pytest.fixture(scope="module")
def fleet_stop(real_kafka: RealKafka, tmp_path_factory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("fleet-enforce")
    suffix = uuid.uuid4().hex[:8]
    decisions, load = f"decisions-{suffix}", f"load-{suffix}"
    if shutil.which("javac") is None:
        pytest.skip("javac (a JDK) is needed to compile harness/ThrottleProducer.java")
    classes = compile_java(kafka_home(), work)
    props = pipeline_properties(real_kafka, **{cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: decisions,
                                               cfg.CHECKPOINT_PATH: str(work / "checkpoint"), cfg.VALIDITY: "PT5M",
                                               cfg.MAX_MUTE: f"PT{MAX_MUTE_S}S"})
    conf = write_properties(work / "cluster.properties", props)
    admin_client = AdminClient(real_kafka.client_config())
    admin_client.create_topics([NewTopic(load, 1, 1)])[load].result(30)
    ensure_topic(client_properties(real_kafka), decisions)
    stop = threading.Event()
    with QuotaAdmin(client_properties(real_kafka)) as admin:
        untouched = admin.describe()
        admin.alter([Change(CATCH_ALL, PRODUCER_BYTE_RATE, PRODUCE)])
        wait_for(lambda: admin.describe().get(CATCH_ALL) == {PRODUCER_BYTE_RATE: PRODUCE}, 20, "the operator quota")
        args = build_parser().parse_args(["enforce", str(conf), "--interval", "1", "--stop", "throttle"])
        enforcer = threading.Thread(target=enforce.run, args=(args, stop), name="enforce", daemon=True)
        clients = start_fleet(kafka_home(), classes, real_kafka.bootstrap(), load, LIBRDKAFKA, JAVA, seconds=240)
        try:
            enforcer.start()
            wait_for(lambda: all_producing(clients, 200_000), 90, "every producer has 200 kB acknowledged")
            before = time.time()
            time.sleep(3)
            pre_rate = sum(c.between(before, time.time()) for c in clients) / (time.time() - before)
            published = time.time()
            publish_decisions(real_kafka, decisions, [(CLUSTER, 0.0, dt.datetime.now(dt.timezone.utc))])
            wait_for(lambda: admin.describe().get(FRESH_DEFAULT) == {PRODUCER_BYTE_RATE: FLOOR}, 20,
                     "the enforcer puts the stop's quota on a new window", every=0.1)
            stopped = time.time()
            time.sleep(max(0.0, stopped + STOP_S - time.time()))
            release = time.time()
            publish_decisions(real_kafka, decisions, [(CLUSTER, 1.0, dt.datetime.now(dt.timezone.utc))])
            wait_for(lambda: FRESH_DEFAULT not in admin.describe(), 20, "the enforcer lifts the stop", every=0.1)
            released = time.time()
            result = stop_outcome(clients, pre_rate, published, stopped, release, released, MAX_MUTE_S)
            _print(result)
            yield result
        finally:
            for c in clients:
                c.stop()
            stop.set()
            enforcer.join(15)
            restore_quotas(admin, untouched)
            for topic in (load, decisions):
                admin_client.delete_topics([topic])[topic].result(30)


def _print(r: dict[str, Any]) -> None:
    total = sum(o.admitted for o in r["clients"])
    print(f"\nenforce fleet at max mute PT{MAX_MUTE_S}S (floor {FLOOR:.0f} B/s): before {r['pre_rate']:.0f} B/s in "
          f"all; the stop's quota shown {r['seen_after']:.2f} s after publishing; {total} bytes admitted over "
          f"{r['released'] - r['stopped']:.1f} s of stop; lifted {r['release_seen_after']:.2f} s after publishing")
    for o in r["clients"]:
        print(f"  {o.client_id}: admitted {o.admitted} B, largest response {o.largest_burst} B, steady "
              f"{o.rate:.0f} B/s, back {o.back_after if o.back_after is None else round(o.back_after, 2)} s")


def bound(o) -> float:
    """1.25 x S / M for a librdkafka client (S: its largest request in the stop); 1.25 x the floor for Java."""
    return SLACK * FLOOR if o.kind == "java" else SLACK * o.largest_burst / MAX_MUTE_S


def test_every_producer_was_producing_before_the_stop(fleet_stop):
    assert fleet_stop["pre_rate"] > 0.5 * (LIBRDKAFKA + JAVA) * PRODUCE / 2, fleet_stop["pre_rate"]


def test_a_stop_admits_at_most_1_25_x_n_x_s_over_m_from_the_fleet(fleet_stop):
    clients = fleet_stop["clients"]
    assert all(o.largest_burst > 100_000 for o in clients if o.kind == "librdkafka"), "large requests when queued"
    total, limit = sum(o.rate for o in clients), sum(bound(o) for o in clients)
    assert total <= limit, f"{total:.0f} B/s admitted in the stop, bound {limit:.0f}"
    over = [(o.client_id, round(o.rate), round(bound(o))) for o in clients if o.rate > bound(o)]
    assert not over, f"clients over their bound (id, B/s, bound): {over}"


def test_every_client_is_back_within_the_max_mute_plus_2_s_of_the_release(fleet_stop):
    late = [(o.client_id, o.back_after) for o in fleet_stop["clients"]
            if o.back_after is None or o.back_after > MAX_MUTE_S + 2]
    assert not late, f"not back within {MAX_MUTE_S + 2} s of the release: {late}"
