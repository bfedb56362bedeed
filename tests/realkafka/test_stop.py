"""`quota-pipeline run` stopped like a service: SIGTERM to its whole process group (systemd's control group,
`timeout`, Kubernetes), then started again from its checkpoint; observing Apache Kafka over SCRAM-SHA-512 and
publishing over SSL. No traceback on its output, decisions never go back in time on the topic but for an exact
re-publication, and no secret in its output, journal, checkpoint or Spark event log."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from quota_pipeline.core import config as cfg
from harness import kafka_config as rc
from harness.kafka import RealKafka
from harness.kafka_process import FAST_START_JVM
from harness.kafka_props import client_properties, pipeline_properties, prefixed, wait_for, write_properties

TOPIC = "stop-decisions"
STACK_TRACE_MARKS = ("Traceback (most recent call last)", "\tat org.apache.", "\tat java.", "Py4JJavaError")


class Follower:
    """Reads the decision topic from offset 0 in a thread and keeps every record."""

    def __init__(self, cluster: RealKafka) -> None:
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._consumer = Consumer({**cluster.client_config(), "group.id": "stop-test", "enable.auto.commit": False})
        self._consumer.assign([TopicPartition(TOPIC, 0, 0)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is not None and not msg.error():
                self.records.append(json.loads(msg.value()))

    def count(self, since: float = 0.0) -> int:
        return sum(1 for r in self.records if _epoch(r["observed_at"]) >= since)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def _epoch(text: str) -> float:
    from quota_pipeline.core.model import parse_time
    return parse_time(text).timestamp()


def start_job(conf: Path, work: Path, name: str) -> subprocess.Popen:
    """The job in a process group of its own, as a service manager starts it; its Spark writes an event log."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_CONF_DIR": str(work / "spark-conf"),
           "JAVA_TOOL_OPTIONS": FAST_START_JVM}  # C1 and serial GC: Spark's JVM starts faster on 2 cores
    return subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "run", str(conf), "--no-metrics",
                             "--master", "local[2]"], stdout=(work / f"{name}.out").open("wb"),
                            stderr=(work / f"{name}.err").open("wb"), cwd=work, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL)


def stop_like_a_service(job: subprocess.Popen, timeout: float = 60.0) -> int:
    os.killpg(job.pid, signal.SIGTERM)
    return job.wait(timeout)


@pytest.fixture(scope="module")
def story(real_kafka: RealKafka, tmp_path_factory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("stop")
    (work / "spark-conf").mkdir()
    (work / "spark-conf" / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir {(work / 'events').as_uri()}\n"
        "spark.eventLog.compress false\n")  # searchable as it is
    (work / "events").mkdir()
    conf = write_properties(work / "secure.properties", pipeline_properties(real_kafka, rc.SASL, **{
        cfg.CHECK_INTERVAL_SECONDS: "1", cfg.VALIDITY: "PT30S", cfg.CLUSTER_NAME: "secure", cfg.OUTPUT_TOPIC: TOPIC,
        cfg.CHECKPOINT_PATH: str(work / "checkpoint")},
        **prefixed(cfg.OUTPUT_KAFKA_PREFIX, client_properties(real_kafka, rc.SSL))))
    events: dict[str, Any] = {"work": work}
    job = start_job(conf, work, "first")
    follower = None
    try:
        follower = wait_for(lambda: (work / "checkpoint" / "query").exists() and Follower(real_kafka), 120,
                            "the job starts its query")
        wait_for(lambda: follower.count() >= 3, 120, "three decisions are published")
        events["first_exit"] = stop_like_a_service(job)
        stopped_at = time.time()
        time.sleep(1)
        first = list(follower.records)
        job = start_job(conf, work, "second")
        wait_for(lambda: follower.count(since=stopped_at) >= 3, 120, "three decisions after the restart")
        events["second_exit"] = stop_like_a_service(job)
        time.sleep(1)
        events["records"] = list(follower.records)
        last = max(r["observed_at"] for r in first)
        again = [r["observed_at"] for r in events["records"][len(first):] if r["observed_at"] <= last]
        print(f"run stopped by SIGTERM to its process group: {len(first)} decisions before, "
              f"{len(events['records']) - len(first)} after the restart, of which {len(again)} at or before the "
              f"last one before the stop {again}")
        yield events
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(10)
        if follower is not None:
            follower.close()


def test_sigterm_to_the_process_group_ends_the_job_without_a_traceback(story):
    assert (story["first_exit"], story["second_exit"]) == (0, 0)
    for name in ("first.out", "first.err", "second.out", "second.err", "checkpoint/run.log"):  # Spark's lines
        text = (story["work"] / name).read_text(errors="replace")
        found = [mark for mark in STACK_TRACE_MARKS if mark in text]
        assert not found, f"{name} has {found}:\n{text[-4000:]}"


def test_decisions_never_go_back_in_time_across_the_restart(story):
    records = story["records"]
    assert all(r["status"] == "SUCCESS" and r["cluster_id"] == "secure" for r in records), records[-3:]
    published: dict[str, dict] = {}
    latest = ""
    for r in records:
        if r["observed_at"] < latest:
            # Only the same decision again, as the re-run of a batch that published before it committed.
            assert r["observed_at"] in published and _decision(published[r["observed_at"]]) == _decision(r), r
        latest = max(latest, r["observed_at"])
        published[r["observed_at"]] = r


def test_every_decision_published_comes_from_a_journaled_snapshot(story):
    """A batch re-run after the restart reads its snapshot from the journal instead of polling again."""
    journaled = {json.loads(p.read_text())["observed_at"]
                 for p in (story["work"] / "checkpoint" / "journal" / "secure").rglob("*.json")}
    published = {r["observed_at"] for r in story["records"]}
    assert published <= journaled, sorted(published - journaled)


def _decision(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "decided_at"}


def test_no_password_or_key_in_output_journal_checkpoint_or_event_log(story, real_kafka: RealKafka):
    work: Path = story["work"]
    logs = sorted(p for p in (work / "events").rglob("*") if p.is_file())
    assert logs, "Spark wrote no event log"
    assert any(b"SparkListenerSQLExecutionStart" in p.read_bytes() for p in logs), "no plan in the event log"
    files = [p for p in work.rglob("*") if p.is_file() and p.name != "secure.properties"]
    assert any("journal" in p.parts for p in files) and any("commits" in p.parts for p in files)
    for path in files:
        data = path.read_bytes()
        for secret in (real_kafka.scram_password.encode(), b"PRIVATE KEY"):
            assert secret not in data, f"{secret!r} appears in {path}"
