"""A decision stall on real Kafka: `quota-pipeline run` publishes to a topic whose follower replica is on a tmpfs log
dir, the tmpfs is filled to ENOSPC, and acks=all deliveries wait until the produce request times out.

Shown as an operator sees it: the start-up warning (validity PT5S against a 1 s interval and a 6 s request timeout),
the seconds-since-acknowledged metric growing during the stall, one log line naming what the publisher waits for,
and the first decision after the stall observed afresh (the ticks inside the stall are skipped, not published late).
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from quota_pipeline.core import config as cfg
from tests.realkafka_process import TmpfsUnavailable
from tests.realkafka_props import client_properties, pipeline_properties, prefixed, write_properties
from tests.realkafka_stall import LEADER, create_decision_topic, fill, stall_cluster, tmpfs_dir
from tests.stream_job import TopicWatcher, start_job, stop_job

pytestmark = pytest.mark.realkafka

CLUSTER = "stall-test"
REPLICA_LAG_MS = 3000
REQUEST_TIMEOUT_MS = 6000  # the stall lasts this long (bench/RESULTS.md): short, and longer than STALL_LOG_AFTER_S
SINCE = re.compile(r'^quota_pipeline_seconds_since_last_acknowledged_decision\{cluster="stall-test"\} (\S+)$', re.M)


def seconds_since_acknowledged(port: int) -> float | None:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
    except OSError:
        return None
    found = SINCE.search(text)
    return float(found.group(1)) if found else None


@pytest.fixture(scope="module")
def stall(tmp_path_factory) -> Iterator[dict[str, Any]]:
    from quota_pipeline.demo.local_broker import free_port
    from tests.realkafka import kafka_home, KafkaUnavailable

    try:
        kafka_home()
        cluster = stall_cluster(REPLICA_LAG_MS)
    except (KafkaUnavailable, TmpfsUnavailable) as exc:
        pytest.skip(str(exc))
    work = tmp_path_factory.mktemp("stall")
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    port = free_port()
    job = watcher = None
    try:
        create_decision_topic(cluster, topic)
        conf = write_properties(work / "stall.properties", pipeline_properties(cluster, **{
            cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: topic, cfg.CHECK_INTERVAL_SECONDS: "1",
            cfg.VALIDITY: "PT5S", cfg.CHECKPOINT_PATH: str(work / "checkpoint"), cfg.METRICS_PORT: str(port),
            **prefixed(cfg.OUTPUT_KAFKA_PREFIX, {**client_properties(cluster),
                                                  "request.timeout.ms": str(REQUEST_TIMEOUT_MS)})}))
        validated = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "validate", str(conf)],
                                   capture_output=True, text=True, timeout=60)
        watcher = TopicWatcher(cluster.bootstrap(), topic)
        log = work / "job.log"
        job = start_job(conf, log, metrics=True)
        watcher.wait_for(lambda r: r["source"] == "OBSERVATION", timeout=180)
        time.sleep(2)  # a few acknowledged decisions: the metric counts from the last one
        before = seconds_since_acknowledged(port)
        filled_at = time.time()
        fill(tmpfs_dir(cluster))
        samples = []  # (time, seconds since the last acknowledged decision) every 0.25 s
        while time.time() < filled_at + REQUEST_TIMEOUT_MS / 1000 + 20:
            samples.append((time.time(), seconds_since_acknowledged(port)))
            if b"acknowledged the waiting decision(s)" in log.read_bytes():
                break
            time.sleep(0.25)
        time.sleep(4)  # the decisions after the stall
        yield {"log": log.read_text(errors="replace"), "records": list(watcher.records), "filled_at": filled_at,
               "samples": samples, "before": before, "after": seconds_since_acknowledged(port), "topic": topic,
               "tmpfs": tmpfs_dir(cluster), "validated": validated}
    finally:
        stop_job(job)
        if watcher is not None:
            watcher.close()
        cluster.stop()


def test_run_warns_once_that_the_validity_does_not_cover_the_stall(stall):
    warnings = [line for line in stall["log"].splitlines() if "does not cover the check interval" in line]
    assert len(warnings) == 1, warnings
    assert (f"max(request.timeout.ms {REQUEST_TIMEOUT_MS}, 1.5 x replica.lag.time.max.ms {REPLICA_LAG_MS})"
            in warnings[0])
    assert "throttle.factor.validity.duration to at least PT9S" in warnings[0]


def test_validate_gives_the_same_warning_and_exit_code_0(stall):
    validated = stall["validated"]
    assert validated.returncode == 0, validated.stderr
    warnings = [line for line in validated.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "to at least PT9S" in warnings[0], validated.stderr


def test_the_metric_grows_while_the_stall_lasts_and_falls_when_it_ends(stall):
    values = [v for _, v in stall["samples"] if v is not None]
    assert stall["before"] is not None and stall["before"] < 2.5, stall["before"]
    assert max(values) >= REQUEST_TIMEOUT_MS / 1000 - 1, values  # above the gap of a slow micro-batch (3.6 s seen)
    assert stall["after"] is not None and stall["after"] < 2.5, stall["after"]


def test_one_log_line_names_what_the_publisher_waits_for(stall):
    lines = [line for line in stall["log"].splitlines() if "not acknowledged for" in line]
    assert len(lines) == 1, lines
    assert f"topic {stall['topic']}, partition 0 leader {LEADER}" in lines[0]
    assert "acks=all waits until every in-sync replica" in lines[0]
    assert f"request.timeout.ms {REQUEST_TIMEOUT_MS}" in lines[0]
    assert "acknowledged the waiting decision(s) after" in stall["log"]


def test_the_first_decision_after_the_stall_is_observed_afresh(stall):
    from quota_pipeline.core.model import parse_time

    after = [(t, r) for t, r in stall["records"] if t >= stall["filled_at"]]
    gaps = [(after[i + 1][0] - after[i][0], i + 1) for i in range(len(after) - 1)]
    gap, i = max(gaps)
    assert gap >= REQUEST_TIMEOUT_MS / 1000 - 2, gaps
    stalled_at, late = after[i]  # the record that waited: observed before the stall, published at its end
    fresh_at, fresh = next((t, r) for t, r in after[i + 1:]
                           if parse_time(r["observed_at"]).timestamp() > parse_time(late["observed_at"]).timestamp())
    # The next batch polls the current tick: the ticks that fell inside the stall are skipped.
    skipped = parse_time(fresh["observed_at"]).timestamp() - parse_time(late["observed_at"]).timestamp()
    assert skipped >= gap - 2, (skipped, gap)
    assert fresh_at - stalled_at < 3, "the fresh decision did not follow the stall within a few seconds"
    assert fresh["throttle_factor"] == 0.0 and fresh["source"] == "OBSERVATION"  # the tmpfs is full
    assert fresh["worst_volume"]["log_dir"] == stall["tmpfs"]
