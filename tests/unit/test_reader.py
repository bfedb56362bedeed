"""The broker-side reader: latest decision per cluster, own validity and fallback, Strimzi's quota limits."""
from __future__ import annotations

import datetime as dt
import itertools
import json
import sys

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import DecisionSource
from quota_pipeline.reader.reader import MIN_QUOTA, UNLIMITED, Reader
from quota_pipeline.core.clock import ManualClock
from harness.kafka_client import T0, create_topic, decision, encode, publish, wait_until
from tests.support.kafka_fixtures import broker  # noqa: F401 (a fixture)

_topics = itertools.count()


def make_config(bootstrap: str = "127.0.0.1:1", **props: str) -> cfg.Config:
    base = {cfg.BOOTSTRAP: bootstrap, cfg.HARD_BYTES: "1000", cfg.CLUSTER_NAME: "c1",
            cfg.VALIDITY: "PT5M", cfg.FALLBACK: "0.5"}
    base.update(props)
    return cfg.parse(base, "<test>")


def new_topic(bootstrap: str) -> str:
    topic = f"decisions-{next(_topics)}"
    create_topic(bootstrap, topic)
    return topic


def test_falls_back_after_valid_until_when_the_publisher_stops_and_recovers_on_the_next_record(broker):
    topic = new_topic(broker.bootstrap_servers)
    conf = make_config(broker.bootstrap_servers, **{cfg.OUTPUT_TOPIC: topic})
    clock = ManualClock(T0 + dt.timedelta(seconds=1))
    changes = []
    publish(broker.bootstrap_servers, topic, [(b"c1", encode(decision("c1", 0.0, T0)))])
    with Reader(conf, clock=clock, poll_seconds=0.05) as reader:
        reader.on_change(lambda cluster, old, new: changes.append((cluster, old, new)))
        wait_until(lambda: reader.current_factor() == 0.0)
        assert reader.answer().basis == "record"

        clock.advance(299)  # exactly valid_until: still valid
        reader.refresh()
        assert reader.current_factor() == 0.0
        clock.advance(0.001)  # the publisher stopped: past valid_until with no newer record
        wait_until(lambda: reader.current_factor() == 0.5)  # the reader's own fallback, found by its thread
        assert reader.answer().basis == "fallback"
        assert "expired" in reader.answer().reason

        publish(broker.bootstrap_servers, topic, [(b"c1", encode(decision("c1", 1.0, T0 + dt.timedelta(minutes=5))))])
        wait_until(lambda: reader.current_factor() == 1.0)
        assert reader.answer().basis == "record"
        wait_until(lambda: len(changes) == 3)
    assert changes == [("c1", 1.0, 0.0), ("c1", 0.0, 0.5), ("c1", 0.5, 1.0)]


def test_invalid_records_are_counted_and_skipped_never_fatal(broker, caplog):
    topic = new_topic(broker.bootstrap_servers)
    conf = make_config(broker.bootstrap_servers, **{cfg.OUTPUT_TOPIC: topic})
    future = dict(decision("c1", 0.3).to_json(), schema_version=3)
    publish(broker.bootstrap_servers, topic, [
        (b"c1", b"{not json"),
        (b"c1", json.dumps(future).encode()),
        (b"c1", b"\xff\xfe"),
        (b"c1", b"[1, 2]"),
        (b"c1", encode(decision("c1", 0.25, T0))),
    ])
    with Reader(conf, clock=ManualClock(T0)) as reader:
        wait_until(lambda: reader.stats.records == 1)
        assert reader.current_factor() == 0.25
        assert reader.stats.skipped == 4
    # One line for the four (at most one per 10 s), the first record's reason in it.
    assert "Expecting property name" in caplog.text and "unknown schema_version" not in caplog.text


def test_follows_every_partition_and_keeps_each_cluster_apart(broker):
    topic = f"decisions-{next(_topics)}"
    create_topic(broker.bootstrap_servers, topic, partitions=3)
    conf = cfg.parse({cfg.BOOTSTRAP: broker.bootstrap_servers, cfg.HARD_BYTES: "1", cfg.OUTPUT_TOPIC: topic})
    publish(broker.bootstrap_servers, topic, [(f"c{i}".encode(), encode(decision(f"c{i}", i / 10))) for i in range(6)])
    with Reader(conf, clock=ManualClock(T0)) as reader:
        wait_until(lambda: len(reader.clusters()) == 6)
        assert [reader.current_factor(f"c{i}") for i in range(6)] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]


def test_waits_for_a_topic_that_does_not_exist_yet(broker):
    topic = f"decisions-{next(_topics)}"
    conf = make_config(broker.bootstrap_servers, **{cfg.OUTPUT_TOPIC: topic})
    with Reader(conf, clock=ManualClock(T0)) as reader:
        assert reader.current_factor() == 1.0
        create_topic(broker.bootstrap_servers, topic)
        publish(broker.bootstrap_servers, topic, [(b"c1", encode(decision("c1", 0.0)))])
        wait_until(lambda: reader.current_factor() == 0.0, timeout=15)


# ---- without a broker: apply_record and refresh --------------------------------------------------

def reader(clock: ManualClock | None = None, **props: str) -> Reader:
    return Reader(make_config(**props), clock=clock or ManualClock(T0))


def test_refuses_a_record_older_than_one_read_before_it():
    r = reader()
    assert r.apply_record(b"c1", encode(decision("c1", 0.0, T0 + dt.timedelta(seconds=10))))
    assert not r.apply_record(b"c1", encode(decision("c1", 1.0, T0)))  # written again: a replay
    assert r.current_factor() == 0.0
    assert r.stats.refused == 1 and "a record written again" in r.stats.last_refusal.reason
    assert r.apply_record(b"c1", encode(decision("c1", 1.0, T0 + dt.timedelta(seconds=10))))  # same time: taken
    assert r.current_factor() == 1.0


FAR = dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc)


def test_a_record_from_the_future_is_refused_counted_and_logged_once_and_genuine_records_still_apply(caplog):
    clock = ManualClock(T0)
    r = reader(clock)
    assert r.apply_record(b"c1", encode(decision("c1", 1.0, T0)))
    forged = decision("c1", 0.0, FAR, validity=None)
    caplog.set_level("WARNING", logger="quota_pipeline.reader.reader")
    assert not r.apply_record(b"c1\n2026 INFO forged line", encode(forged), " at decisions/0@7")
    assert not r.apply_record(b"c1", encode(forged), " at decisions/0@8")  # within 10 s: counted, not logged
    assert (r.current_factor(), r.stats.refused, r.stats.records) == (1.0, 2, 1)
    assert r.stats.last_refusal is not None and r.stats.last_refusal.where == " at decisions/0@8"
    assert "9999-12-31" in r.stats.last_refusal.reason and "quota.pipeline.reader.max.clock.skew allows PT30S" in \
        r.stats.last_refusal.reason
    lines = [rec.getMessage() for rec in caplog.records if "refused a decision record" in rec.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith('refused a decision record at decisions/0@7 (key "c1\\x0a2026 INFO forged line"): '
                               "observed_at 9999-12-31T00:00:00.000Z is ")
    assert lines[0].endswith("the decision in force is kept (1 refused so far)")

    clock.advance(11)  # the next refusal after the interval is logged again, with the count of those not logged
    assert not r.apply_record(b"c1", encode(forged), " at decisions/0@9")
    assert "3 refused so far, 1 of them not logged" in caplog.records[-1].getMessage()
    assert r.apply_record(b"c1", encode(decision("c1", 0.0, T0 + dt.timedelta(seconds=11))))  # genuine: taken
    assert r.current_factor() == 0.0


def test_a_forged_valid_until_is_honoured_only_until_observed_at_plus_validity_plus_skew(caplog):
    clock = ManualClock(T0)
    r = reader(clock, **{cfg.MAX_CLOCK_SKEW: "PT10S"})
    caplog.set_level("WARNING", logger="quota_pipeline.reader.reader")
    assert r.apply_record(b"c1", encode(decision("c1", 0.0, T0, validity=dt.timedelta(days=3650))))
    assert "it is honoured until 2026-11-21T10:05:10.000Z" in caplog.text
    clock.advance(310)
    assert r.current_factor() == 0.0
    clock.advance(0.001)
    assert (r.current_factor(), r.answer().basis) == (0.5, "fallback")
    assert "beyond observed_at + validity + skew" in r.answer().reason


def test_before_any_record_the_factor_is_one_for_one_validity_then_the_fallback():
    clock = ManualClock(T0)
    r = reader(clock)
    assert (r.current_factor(), r.answer().basis) == (1.0, "initial")
    clock.advance(300.001)
    assert (r.current_factor(), r.answer().basis) == (0.5, "fallback")


def test_a_fallback_record_means_the_readers_own_fallback():
    r = reader(**{cfg.FALLBACK: "0.2"})
    r.apply_record(b"c1", encode(decision("c1", 1.0, source=DecisionSource.FALLBACK)))
    assert r.current_factor() == 0.2


def test_a_tombstone_is_absence_and_never_shortens_a_stop():
    r = reader()
    r.apply_record(b"c1", encode(decision("c1", 0.0)))
    r.apply_record(b"c1", None)
    assert r.decision("c1") is not None and r.stats.tombstones == 1
    assert r.current_factor() == 0.0


def test_the_record_key_names_the_cluster():
    r = reader(**{cfg.CLUSTER_NAME: "prod-eu"})
    r.apply_record(b"prod-eu", encode(decision("some-cluster-id", 0.0)))
    assert r.current_factor("prod-eu") == 0.0


def test_a_reader_of_one_cluster_keeps_no_other_clusters_record():
    r = reader()
    for i in range(10_000):
        assert not r.apply_record(f"other-{i}".encode(), encode(decision(f"other-{i}", 0.0)))
    r.apply_record(b"c1", encode(decision("c1", 0.25)))
    assert r.clusters() == ["c1"] and r.current_factor() == 0.25
    with pytest.raises(ValueError, match="serves cluster c1 only"):
        r.current_factor("other-1")


def test_current_factor_without_a_cluster_says_what_to_set():
    r = Reader(cfg.parse({cfg.BOOTSTRAP: "x:1", cfg.HARD_BYTES: "1"}), clock=ManualClock(T0))
    with pytest.raises(ValueError, match="quota.pipeline.cluster.name"):
        r.current_factor()


@pytest.mark.parametrize("factor, quota_type, principal, props, expected", [
    (0.5, "PRODUCE", "alice", {cfg.PRODUCE: "1000"}, 500.0),
    (0.0, "PRODUCE", "alice", {cfg.PRODUCE: "1000"}, MIN_QUOTA),       # floored at 1.0
    (0.001, "PRODUCE", "alice", {cfg.PRODUCE: "100"}, MIN_QUOTA),
    (0.0, "PRODUCE", "alice", {}, MIN_QUOTA),                          # unlimited x 0 = 0 -> 1.0
    (1.0, "PRODUCE", "alice", {}, UNLIMITED),
    (0.5, "PRODUCE", "alice", {}, sys.float_info.max * 0.5),           # Strimzi: Double.MAX_VALUE x factor
    (0.0, "FETCH", "alice", {cfg.FETCH: "2000"}, 2000.0),              # fetch unscaled
    (0.0, "FETCH", "alice", {}, UNLIMITED),
    (0.0, "REQUEST", "alice", {cfg.REQUEST: "0.5"}, MIN_QUOTA),        # Strimzi floors every type at 1.0
    (0.0, "REQUEST", "alice", {cfg.REQUEST: "50"}, 50.0),
    (0.0, "PRODUCE", "pipeline", {cfg.PRODUCE: "1000"}, UNLIMITED),   # excluded principal
    (0.0, "PRODUCE", "User:pipeline", {cfg.PRODUCE: "1000"}, UNLIMITED),
    (0.0, "FETCH", "pipeline", {cfg.FETCH: "10"}, UNLIMITED),
    (0.0, "produce", None, {cfg.PRODUCE: "1000"}, MIN_QUOTA),
])
def test_quota_limit_reproduces_the_strimzi_callback(factor, quota_type, principal, props, expected):
    # With Strimzi's floor of 1 byte/s; the pipeline's default floor is covered below.
    r = reader(**{cfg.EXCLUDED: "User:pipeline;User:admin", cfg.PRODUCE_FLOOR: "1.0", **props})
    r.apply_record(b"c1", encode(decision("c1", factor)))
    assert r.quota_limit(quota_type, principal) == expected


@pytest.mark.parametrize("factor, props, expected", [
    (0.0, {}, 1048576 / 42),                               # a stop starts at a 32 s mute for a 1 MiB request
    (0.0, {cfg.PRODUCE: "10485760"}, 1048576 / 42),
    (0.5, {cfg.PRODUCE: "10485760"}, 5242880.0),
    (0.0, {cfg.PRODUCE: "20000"}, 20000.0),                # the stop limit never raises a static quota
    (0.0, {cfg.PRODUCE: "10485760", cfg.PRODUCE_FLOOR: "65536"}, 65536.0),  # the deprecated fixed floor
])
def test_a_stop_leaves_each_producer_the_limit_of_the_max_mute(factor, props, expected):
    r = reader(**props)
    r.apply_record(b"c1", encode(decision("c1", factor)))
    assert r.quota_limit("PRODUCE", "alice", "app") == expected


def test_on_change_fires_once_per_change_and_survives_a_broken_callback():
    clock = ManualClock(T0)
    r = reader(clock)
    seen = []
    r.on_change(lambda *a: 1 / 0)
    r.on_change(lambda *a: seen.append(a))
    r.refresh()
    r.apply_record(b"c1", encode(decision("c1", 0.0)))
    r.refresh()
    r.refresh()
    clock.advance(301)
    r.refresh()
    assert seen == [("c1", 1.0, 0.0), ("c1", 0.0, 0.5)]


def test_a_flood_of_bad_records_is_one_quoted_line_per_10_s(caplog):
    clock = ManualClock(T0)
    r = reader(clock=clock)
    bad = json.dumps({**decision("c1", 0.0).to_json(), "observed_at": "2026\nINFO forged " + "x" * 10_000}).encode()
    with caplog.at_level("WARNING", logger="quota_pipeline.reader.reader"):
        for i in range(500):
            assert not r.apply_record(b"c1", bad, f" at decisions/0@{i}")
            clock.t += dt.timedelta(milliseconds=10)
        clock.t += dt.timedelta(seconds=10)
        r.apply_record(b"c1", bad, " at decisions/0@500")
    lines = [rec.getMessage() for rec in caplog.records if "skipped a record" in rec.getMessage()]
    assert len(lines) == 2 and r.stats.skipped == 501
    assert all("\n" not in line and len(line) < 400 for line in lines), lines
    assert 'observed_at is not an RFC 3339 timestamp (not an RFC 3339 timestamp such as 2026-11-21T10:00:00.000Z): ' \
           '"2026\\x0aINFO forged' in lines[0]
    assert lines[1].endswith("(501 skipped so far, 499 of them not logged)")
