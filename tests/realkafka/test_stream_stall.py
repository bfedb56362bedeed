"""A decision stall on real Kafka: `quota-pipeline run` publishes to a topic whose follower replica is on a tmpfs log
dir, the tmpfs is filled to ENOSPC, and the acks=all delivery of the next decision waits while the failed follower
still counts as caught up (harness/kafka_stall.py says why, bench/RESULTS.md measures it). Each record starts a
segment, so the first decision after the fill is the one node 1 fails to replicate (it cannot roll its segment on
the full tmpfs), whatever the size of the records and however slow the micro-batches.

Shown as an operator sees it: the start-up warning (validity PT5S against a 1 s interval, an 8 s request timeout and an 8 s replica lag),
the seconds-since-acknowledged metric growing past the validity during the stall and falling when it ends, one log
line naming what the publisher waits for, and the first decision after the stall observed afresh (the ticks inside
the stall are skipped, not published late). Timing is judged against what the test itself sees (each record's
decided_at, the acknowledgement time the job reports), never against fixed sub-second bounds: the machine may be busy.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any, Iterator

import pytest

from quota_pipeline.core import config as cfg
from harness.kafka_process import TmpfsUnavailable
from harness.kafka_props import client_properties, pipeline_properties, prefixed, wait_for, write_properties
from harness.kafka_stall import (FOLLOWER, LEADER, create_decision_topic, failure_lines, fill, placement,
                                stall_cluster, tmpfs_dir)
from harness.stream_job import TopicWatcher, start_job, stop_job

CLUSTER = "stall-test"
# Whichever drops the failed follower from the ISR first decides the stall (harness/kafka_stall.py): the leader
# itself, after the lag (8-12 s; a failed roll leaves the log dir online, so here it is the leader), or the
# controller, and then the request timeout (8 s). Either way at least STALL_S: short, yet seconds past both the
# validity and the publisher's 3 s before its line.
REPLICA_LAG_MS = 8000
REQUEST_TIMEOUT_MS = 8000
STALL_S = min(REPLICA_LAG_MS, REQUEST_TIMEOUT_MS) / 1000 - 1  # less the follower's last fetch before the record
VALIDITY_S = 5
ENDED = "acknowledged the waiting decision(s) after"
SINCE = re.compile(r'^quota_pipeline_last_acknowledged_decision_age_seconds\{cluster="stall-test"\} (\S+)$', re.M)
ACKED = re.compile(r'^quota_pipeline_last_acknowledged_decision_timestamp_seconds\{cluster="stall-test"\} (\S+)$',
                   re.M)


def scrape(port: int) -> tuple[float, float | None, float | None]:
    """(when the scrape was sent, seconds since the last acknowledged decision, that acknowledgement's time)."""
    sent = time.time()
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return sent, None, None
    since, acked = SINCE.search(text), ACKED.search(text)
    return sent, float(since.group(1)) if since else None, float(acked.group(1)) if acked else None


def decided(record: dict) -> float:
    from quota_pipeline.core.model import parse_time
    return parse_time(record["decided_at"]).timestamp()


def observed(record: dict) -> float:
    from quota_pipeline.core.model import parse_time
    return parse_time(record["observed_at"]).timestamp()


def stalled_and_fresh(records: list[tuple[float, dict]], filled_at: float) -> tuple[Any, Any] | None:
    """Among the records that arrived after the fill, the one that waited longest between its decision and its
    arrival (the stalled one), and the first record after it observed later (the fresh one); None until both have
    arrived."""
    after = [(i, t, r) for i, (t, r) in enumerate(records) if t >= filled_at]
    if not after:
        return None
    i, arrived, stalled = max(after, key=lambda x: x[1] - decided(x[2]))
    fresh = next(((t, r) for t, r in records[i + 1:] if observed(r) > observed(stalled)), None)
    return ((arrived, stalled), fresh) if fresh else None


@pytest.fixture(scope="module")
def stall(tmp_path_factory) -> Iterator[dict[str, Any]]:
    from harness.ports import free_port
    from harness.kafka import kafka_home, KafkaUnavailable

    try:
        kafka_home()
        cluster = stall_cluster(REPLICA_LAG_MS)
    except (KafkaUnavailable, TmpfsUnavailable) as exc:
        pytest.skip(str(exc))
    work = tmp_path_factory.mktemp("stall")
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    port = free_port()
    job = watcher = validate = None
    try:
        create_decision_topic(cluster, topic, roll_every_record=True)  # the first decision after the fill waits
        conf = write_properties(work / "stall.properties", pipeline_properties(cluster, **{
            cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: topic, cfg.CHECK_INTERVAL_SECONDS: "1",
            cfg.VALIDITY: f"PT{VALIDITY_S}S", cfg.CHECKPOINT_PATH: str(work / "checkpoint"),
            cfg.METRICS_PORT: str(port),
            **prefixed(cfg.OUTPUT_KAFKA_PREFIX, {**client_properties(cluster),
                                                  "request.timeout.ms": str(REQUEST_TIMEOUT_MS)})}))
        watcher = TopicWatcher(cluster.bootstrap(), topic)
        log = work / "job.log"
        job = start_job(conf, log, metrics=True)
        # validate runs while Spark starts: the slowest part of the test is the job's first micro-batch
        validate = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "validate", str(conf)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watcher.wait_for(lambda r: r["source"] == "OBSERVATION", timeout=240)
        # The stall needs node 2 leading with node 1 in sync; a busy machine may have moved either for a while.
        placed = wait_for(lambda: placement(cluster, topic) == (LEADER, [FOLLOWER, LEADER]), 30,
                          f"node {LEADER} leads {topic} with node {FOLLOWER} in sync")
        filled_at = time.time()
        fill(tmpfs_dir(cluster))
        samples = []  # scrape() every 0.25 s until the stall has ended and a fresh decision followed it
        deadline = filled_at + 150  # a loaded machine may take many seconds per micro-batch
        while time.time() < deadline:
            samples.append(scrape(port))
            if ENDED in log.read_text(errors="replace") and stalled_and_fresh(list(watcher.records), filled_at):
                break
            time.sleep(0.25)
        validated = validate.communicate(timeout=120)
        yield {"log": log.read_text(errors="replace"), "records": list(watcher.records), "filled_at": filled_at,
               "samples": samples, "topic": topic, "tmpfs": tmpfs_dir(cluster), "placed": placed,
               "validate": (validate.returncode, *validated), "brokers": "\n".join(failure_lines(cluster, topic))}
    finally:
        if validate is not None and validate.poll() is None:
            validate.kill()
        stop_job(job)
        if watcher is not None:
            watcher.close()
        cluster.stop()


@pytest.fixture(scope="module")
def ends(stall) -> tuple[tuple[float, dict], tuple[float, dict]]:
    """((arrival, record) of the stalled decision, (arrival, record) of the first fresh one after it)."""
    found = stalled_and_fresh(stall["records"], stall["filled_at"])
    assert found, (f"no stall and fresh decision after it; records after the fill: "
                   f"{[(round(t - stall['filled_at'], 1), r['observed_at']) for t, r in stall['records']]}\n"
                   f"brokers:\n{stall['brokers']}")
    return found


def test_run_warns_once_that_the_validity_does_not_cover_the_stall(stall):
    warnings = [line for line in stall["log"].splitlines() if "does not cover the check interval" in line]
    assert len(warnings) == 1, warnings
    assert (f"max(request.timeout.ms {REQUEST_TIMEOUT_MS}, 1.5 x replica.lag.time.max.ms {REPLICA_LAG_MS})"
            in warnings[0])
    assert "throttle.factor.validity.duration to at least PT15S" in warnings[0]


def test_validate_gives_the_same_warning_and_exit_code_0(stall):
    code, _, err = stall["validate"]
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "to at least PT15S" in warnings[0], err


def test_the_stalled_decision_waited_for_the_failed_follower(stall, ends):
    (arrived, record), _ = ends
    waited = arrived - decided(record)
    # The leader answers no sooner; a busy machine only makes it later.
    assert waited >= STALL_S, (waited, stall["brokers"])
    said = re.search(re.escape(ENDED) + r" (\S+) s", stall["log"])
    assert said and float(said.group(1)) >= STALL_S, said


def test_the_metric_grows_past_the_validity_while_the_stall_lasts_and_falls_when_it_ends(stall, ends):
    (_, record), _ = ends
    start = decided(record)  # the decision that waits; the acknowledgement before it came earlier
    during = [(t, since, acked) for t, since, acked in stall["samples"] if since is not None and start <= t
              and acked is not None and acked < start]
    assert during, stall["samples"]
    # While it waits, the metric counts from an acknowledgement older than the stalled decision, and so grows
    # with the clock: every scrape sees at least the time since that decision, and the last ones pass the validity.
    assert all(since >= t - start for t, since, _ in during), during
    assert max(since for _, since, _ in during) > VALIDITY_S, during
    # Acknowledged: the job reports an acknowledgement at the end of the stall, and the metric counts from it.
    after = [(t, since, acked) for t, since, acked in stall["samples"] if acked is not None and acked >= start]
    assert after, stall["samples"]
    t, since, acked = after[0]
    assert acked >= start + STALL_S, after[0]
    assert t - acked - 0.01 <= since <= t - acked + 2, after[0]  # computed within the scrape (2 s at most)
    assert since < max(since for _, since, _ in during), (after[0], during)


def test_one_log_line_names_what_the_publisher_waits_for(stall):
    lines = [line for line in stall["log"].splitlines() if "not acknowledged for" in line]
    assert len(lines) == 1, lines
    assert f"topic {stall['topic']}, partition 0 leader {LEADER}, replicas [{LEADER}, {FOLLOWER}]" in lines[0], lines
    assert "acks=all waits until every in-sync replica" in lines[0]
    assert f"request.timeout.ms {REQUEST_TIMEOUT_MS}" in lines[0]
    assert stall["log"].count(ENDED) == 1


def test_the_first_decision_after_the_stall_is_observed_afresh(stall, ends):
    (_, stalled), (_, fresh) = ends
    acknowledged = min(acked for t, _, acked in stall["samples"] if acked is not None and acked >= decided(stalled))
    # The next batch polls the current tick once the stalled one is acknowledged: the ticks inside the stall are
    # skipped, so the fresh decision was observed after that acknowledgement, not during the stall.
    assert observed(fresh) >= acknowledged - 1, (stalled["observed_at"], fresh["observed_at"], acknowledged)
    assert observed(fresh) - observed(stalled) >= STALL_S
    assert fresh["throttle_factor"] == 0.0 and fresh["source"] == "OBSERVATION"  # the tmpfs is full
    assert fresh["worst_volume"]["log_dir"] == stall["tmpfs"]
