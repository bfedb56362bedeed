"""`quota-pipeline tail`: the dashboard's facts in a terminal (rich), and `--json` printing records as they arrive."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid

import pytest
from rich.console import Console

from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.signing import parse_keys
from quota_pipeline.dashboard import terminal, view
from quota_pipeline.dashboard.history import History
from harness.ports import free_port
from harness.dashboard import encode, filling_story, record, steady_story, volume
from tests.support.kafka_fixtures import broker  # noqa: F401 (a fixture)
from harness.kafka_client import create_topic, publish

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
SETTINGS = view.ViewSettings(check_interval=MINUTE, fallback=1.0)


def shown(summaries, feed, now, unreadable=0) -> str:
    console = Console(record=True, width=160, color_system=None)
    console.print(terminal.render(summaries, feed, now, SETTINGS, unreadable))
    return console.export_text()


def feed_status(state: str = "following", message: str = "following t") -> view.FeedStatus:
    return view.FeedStatus(state, message, T0, "__quota_throttle_factors", "k:9092", caught_up=True)


def test_the_terminal_view_says_how_many_records_were_refused_and_the_last_ones_place_and_why():
    h = History(clock=ManualClock(T0))
    forged = record("c1", dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc), 0.0)
    h.apply(b"c1\x1b[2J", encode(forged), "at __quota_throttle_factors/2@17")
    console = Console(record=True, width=400, color_system=None)
    console.print(terminal.render([], feed_status(), T0, SETTINGS, 0, (h.refused_total, h.last_refused)))
    text = console.export_text()
    assert "1 decision record(s) refused as the brokers refuse them (not signed with a configured key, written again, " \
        "or dated further ahead of this clock than quota.pipeline.reader.max.clock.skew allows)" in text
    assert 'last: key "c1\\x1b[2J" at __quota_throttle_factors/2@17: observed_at 9999-12-31T00:00:00.000Z is ' in text


def test_the_terminal_view_names_a_missing_signature_as_the_reason_of_a_refusal():
    key = parse_keys("k1:" + "s" * 40)
    h = History(clock=ManualClock(T0), signing_keys=key)
    h.apply(b"c1", encode(record("c1", T0, 0.0)), "at __quota_throttle_factors/0@3")
    console = Console(record=True, width=400, color_system=None)
    console.print(terminal.render([], feed_status(), T0, SETTINGS, 0, (h.refused_total, h.last_refused)))
    text = console.export_text()
    assert h.refused_total == 1 and "1 decision record(s) refused as the brokers refuse them" in text
    assert 'last: key "c1" at __quota_throttle_factors/0@3: it carries no quota-pipeline-signature header' in text


def test_the_terminal_view_shows_the_throttled_cluster_first_and_why():
    h = History(clock=ManualClock(T0 + 20 * MINUTE))  # read after the fact: no record is ahead of the clock
    for r in [*steady_story("calm", T0, 20, MINUTE), *filling_story("prod-east", T0, 20, MINUTE),
              record("quiet", T0 + 10 * MINUTE, 1.0, validity=dt.timedelta(hours=1))]:
        h.apply(r["cluster_id"].encode(), encode(r))
    h.apply(b"calm", b"{broken")
    now = T0 + 19 * MINUTE + dt.timedelta(seconds=1)
    text = shown(view.overview(h.records(), now, SETTINGS), feed_status(), now, h.unreadable_total)
    rows = [line.split()[0] for line in text.splitlines() if line.strip().startswith(("prod-east", "calm", "quiet"))]
    assert rows[:3] == ["prod-east", "quiet", "calm"]  # then the details of the clusters at risk
    assert next(line for line in text.splitlines() if line.startswith("prod-east ")).split()[1] == "0"
    assert "prod-east: STOPPED, factor 0: 1 log dir(s) at or below the hard limit; closest broker 3 /data/1" in text
    assert "orders-3 40.0 GiB" in text and "50.0 MiB/s" in text
    assert "No decision for 9 min" in text and "1 record(s) could not be read" in text


def stopped(stop: dict | None, volumes: list | None = None) -> str:
    """The captured screen of one cluster at factor 0 whose record carries `stop`."""
    rec = record("prod-east", T0, 0.0, volumes or [volume(3, "/data/1", 0.01), volume(5, "/data/2", None),
                                                   volume(1, "/data/0", 0.6)])
    rec["stop"] = stop
    h = History(clock=ManualClock(T0))
    h.apply(b"prod-east", encode(rec))
    console = Console(record=True, width=220, color_system=None)
    console.print(terminal.render(view.overview(h.records(), T0, SETTINGS), feed_status(), T0, SETTINGS))
    return console.export_text()


def test_the_terminal_view_of_a_targeted_stop_names_the_refused_topics_the_count_and_the_dirs_why():
    text = stopped({"scope": "topics", "topics": [f"orders-{i:02d}" for i in range(12)] + ["evil\x1b[2J"]})
    assert next(line for line in text.splitlines() if line.startswith("prod-east ")).split()[:3] == \
        ["prod-east", "0", "STOPPED"]
    assert "STOPPED: writes refused to 13 topics: evil\\x1b[2J, orders-00, orders-01, orders-02, orders-03, " \
        "orders-04, orders-05, orders-06, orders-07, orders-08 + 3 more" in text
    assert "orders-09" not in text and "THROTTLED" not in text and "\x1b" not in text
    assert "why: 2 log dir(s) at or below the hard limit (broker 3 /data/1: 1.0% available, hard limit 5.0%; " \
        "broker 5 /data/2: offline (counts as full))" in text


def test_the_terminal_view_of_a_cluster_stop_says_every_topic():
    text = stopped({"scope": "cluster"})
    assert "STOPPED: writes refused to every topic" in text and "refused to 0" not in text
    assert "why: 2 log dir(s) at or below the hard limit (broker 3 /data/1" in text
    # A record without a stop (written before the field) stops the whole cluster, as brokers read it.
    assert "STOPPED: writes refused to every topic" in stopped(None)


def test_the_terminal_view_says_when_the_topic_cannot_be_read():
    feed = feed_status("unreachable", "cannot reach the Kafka cluster at k:9092 (1/1 brokers are down)")
    text = shown([], feed, T0 + MINUTE)
    assert "decision topic unavailable for 1 min: cannot reach the Kafka cluster at k:9092" in text
    assert "no decision on the topic yet" in text


def tail(conf, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "tail", "--config", str(conf), *args],
                          capture_output=True, text=True, timeout=timeout)


def write_config(path, bootstrap: str, topic: str):
    path.write_text("client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05\n"
                    f"quota.pipeline.output.kafka.bootstrap.servers={bootstrap}\n"
                    f"quota.pipeline.output.topic={topic}\n")
    return path


@pytest.fixture
def topic_with_records(broker, tmp_path):
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic)
    now = dt.datetime.now(dt.timezone.utc)
    records = [record("prod-east", now - MINUTE, 1.0), record("prod-east", now, 0.0, [volume(3, "/data/1", 0.01)]),
               record("legacy", now, 1.0, version=1)]
    publish(broker.bootstrap_servers, topic, [(r["cluster_id"].encode(), encode(r)) for r in records]
            + [(b"legacy", b"[1, 2]")])
    return write_config(tmp_path / "c.properties", broker.bootstrap_servers, topic), records, topic
def test_tail_json_prints_every_record_in_order_and_says_which_it_cannot_read(topic_with_records):
    conf, records, topic = topic_with_records
    done = tail(conf, "--json", "--once")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == records
    assert f"unreadable record at {topic}/0@3 (key 'legacy')" in done.stderr
def test_tail_json_prints_a_record_as_it_arrives(topic_with_records, broker):
    conf, records, topic = topic_with_records
    proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "tail", "--config", str(conf), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert [json.loads(proc.stdout.readline()) for _ in records] == records
        new = record("prod-east", dt.datetime.now(dt.timezone.utc), 1.0)
        publish(broker.bootstrap_servers, topic, [(b"prod-east", encode(new))])
        assert json.loads(proc.stdout.readline()) == new
    finally:
        proc.terminate()
        proc.wait(10)
def test_tail_once_shows_the_view(topic_with_records):
    conf, _, _ = topic_with_records
    done = tail(conf, "--once")
    assert done.returncode == 0, done.stderr
    first = next(line for line in done.stdout.splitlines() if line.startswith(("prod-east ", "legacy ")))
    assert first.split()[:3] == ["prod-east", "0", "STOPPED"]
    assert "1 record(s) could not be read" in done.stdout and "broker 3 /data/1" in done.stdout


def test_tail_once_says_when_the_cluster_is_unreachable(tmp_path):
    conf = write_config(tmp_path / "c.properties", f"127.0.0.1:{free_port()}", "t")
    done = tail(conf, "--once", "--catch-up-timeout", "3")
    assert done.returncode == 1
    assert "decision topic unavailable" in done.stdout and "cannot reach the Kafka cluster" in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith("error: could not read t within 3 s: cannot reach")


def test_tail_without_a_cluster_for_the_topic_says_what_to_set(tmp_path):
    conf = tmp_path / "c.properties"
    conf.write_text("client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05\n")
    done = tail(conf, "--once")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "set quota.pipeline.output.kafka.bootstrap.servers" in done.stderr
