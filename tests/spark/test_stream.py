"""The streaming job end to end, as an operator runs it: simulator + Tansu + `quota-pipeline run` processes.

One story, one cluster, a 1 s check interval: healthy, a disk crosses the limit (latency checked), it is
freed, it fills again, the job is killed (SIGKILL) while throttled, every poll then fails, the job restarts
from its checkpoint (no 1.0 may be published in between), the failure outlasts the validity (fallback),
and the cluster recovers. Then the job's own journal is replayed and must give the published decisions.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.simulator import Simulator
from quota_pipeline.demo.local_broker import LocalBroker
from harness.ports import free_port
from harness.stream_job import TopicWatcher, start_job

TOTAL = 1000 * 10 ** 9
VALIDITY_S = 45
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    work = tmp_path_factory.mktemp("stream")
    sim = Simulator({"cluster_id": "e2e", "brokers": 3, "log_dirs": 1,
                     "defaults": {"total_bytes": TOTAL, "used_ratio": 0.5}}, port=0).start()
    broker = LocalBroker(log_path=work / "tansu.log").start()
    conf_path = work / "e2e.properties"
    conf_path.write_text("\n".join([
        f"{cfg.HARD_RATIO}=0.1",
        f"{cfg.CHECK_INTERVAL_SECONDS}=1",
        f"{cfg.VALIDITY}=PT{VALIDITY_S}S",
        f"{cfg.FALLBACK}=0.5",
        f"{cfg.BOOTSTRAP}={sim.bootstrap_servers}",
        f"{cfg.ADMIN_PREFIX}request.timeout.ms=700",
        f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
        f"{cfg.OUTPUT_KAFKA_PREFIX}delivery.timeout.ms=3000",
        f"{cfg.CHECKPOINT_PATH}={work / 'checkpoint'}",
        f"{cfg.METRICS_PORT}={free_port()}",
    ]) + "\n")
    log = work / "job.log"
    events: dict = {"log": log, "conf": conf_path, "work": work}
    job = start_job(conf_path, log)
    watcher = None
    try:
        deadline = time.time() + 120
        while watcher is None and time.time() < deadline:  # the job creates the topic on start
            time.sleep(0.5)
            if b"output topic" in log.read_bytes():
                watcher = TopicWatcher(broker.bootstrap_servers, "__quota_throttle_factors")
        assert watcher, f"job did not start: {log.read_text()[-3000:]}"
        events["watcher"] = watcher
        # The first decision waits on Spark's start (JVMs, Python workers, the kernel compiled): over 2 minutes on 2
        # busy cores, so this bounds a start, not the job's latency (the throttle below is held to 10 s).
        watcher.wait_for(lambda r: r["throttle_factor"] == 1.0 and r["source"] == "OBSERVATION", 300)

        # A disk crosses the limit.
        filled_at = time.time()
        sim.state.set_available(2, 0, TOTAL * 0.05)
        events["throttle_latency"] = watcher.wait_for(lambda r: r["throttle_factor"] == 0.0, 10)[0] - filled_at

        # Freed: a complete snapshot releases.
        n = len(watcher.records)
        sim.state.set_available(2, 0, TOTAL * 0.5)
        events["release"] = watcher.wait_for(lambda r: r["throttle_factor"] == 1.0, 10, since=n)[1]

        # Fills again; kill the job while throttled; every poll fails from then on.
        n = len(watcher.records)
        sim.state.set_available(2, 0, TOTAL * 0.02)
        watcher.wait_for(lambda r: r["throttle_factor"] == 0.0, 10, since=n)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(10)
        fault = sim.state.add_fault({"type": "describe_cluster_error"})
        killed_at = len(watcher.records)
        job = start_job(conf_path, log)
        # The failure outlasts the validity: the fallback, not a release, follows.
        events["fallback"] = watcher.wait_for(lambda r: r["source"] == "FALLBACK", VALIDITY_S + 90, since=killed_at)
        events["after_kill"] = [r for _, r in watcher.records[killed_at:]]
        # Recovery: the disk is still full, so the first deciding observation throttles again.
        sim.state.remove_fault(fault)
        n = len(watcher.records)
        watcher.wait_for(lambda r: r["source"] == "OBSERVATION" and r["throttle_factor"] == 0.0, 15, since=n)
        n = len(watcher.records)
        sim.state.set_available(2, 0, TOTAL * 0.5)
        watcher.wait_for(lambda r: r["throttle_factor"] == 1.0, 10, since=n)

        # The output cluster goes away: deliveries fail, so do micro-batches, and the job restarts them (it used
        # to exit). A new broker on the same port, empty: the job re-creates the topic and publishes again.
        log_size = log.stat().st_size
        broker.stop()
        time.sleep(1)  # let the watcher read what the old broker acknowledged before it went
        earlier = list(watcher.records)
        watcher.close()
        watcher = None
        deadline = time.time() + 60
        while b"micro-batch failed, restarting" not in log.read_bytes()[log_size:] and time.time() < deadline:
            time.sleep(0.5)
        events["failed_batch_log"] = log.read_bytes()[log_size:].decode(errors="replace")
        events["alive_after_failure"] = job.poll() is None
        broker = LocalBroker(port=broker.port, log_path=work / "tansu-2.log").start()
        deadline = time.time() + 60
        while watcher is None and time.time() < deadline:
            time.sleep(1)
            try:
                watcher = TopicWatcher(broker.bootstrap_servers, "__quota_throttle_factors")
            except Exception:  # noqa: BLE001 - the topic is not there until the job re-creates it
                watcher = None
        assert watcher, "the job did not re-create the topic on the new broker"
        events["after_restart"] = watcher.wait_for(lambda r: r["source"] == "OBSERVATION", 60)[1]
        # Decisions the old broker acknowledged as it stopped may never have reached the watcher: the outage's
        # window, from the last record read before it to the first read after it.
        events["outage"] = (earlier[-1][1]["observed_at"], watcher.records[0][1]["observed_at"])

        # Stop gracefully and let the last batch land.
        os.kill(job.pid, signal.SIGTERM)  # as an orchestrator would: the job, not its JVM
        job.wait(60)
        time.sleep(1)
        events["published"] = [r for _, r in earlier + watcher.records]
        yield events
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        if watcher:
            watcher.close()
        broker.stop()
        sim.stop()


def test_a_failed_delivery_restarts_the_query_instead_of_ending_the_job(story):
    assert "micro-batch failed, restarting from the checkpoint" in story["failed_batch_log"]
    assert story["alive_after_failure"], story["failed_batch_log"][-2000:]
    assert story["after_restart"]["throttle_factor"] == 1.0


def test_crossing_the_limit_throttles_within_one_interval_plus_a_few_seconds(story):
    # The latency itself is a benchmark's (bench/stream_latency.py, bench/real_latency.py: p99 about 0.5 s on a quiet
    # machine); here the other test worker's Spark shares the 2 CPUs, and the bound only catches a decision that
    # waits for a later poll, a restart or the validity.
    assert story["throttle_latency"] <= 1 + 4, story["throttle_latency"]


def test_freeing_the_disk_releases(story):
    assert story["release"]["source"] == "OBSERVATION" and story["release"]["violations"] == 0


def test_restart_from_checkpoint_keeps_the_throttle(story):
    """With the state lost, the restarted job's first failed poll would publish the initial 1.0 for one validity. With
    it kept, the job holds 0.0 until the validity of the last observation before the kill runs out, then the
    fallback: all of it RETAINED 0.0 when Spark restarts within the validity, the fallback at once when the restart
    took longer (a loaded machine), never a release."""
    after = story["after_kill"]
    before_fallback = after[:next(i for i, r in enumerate(after) if r["source"] == "FALLBACK")]
    assert all(r["throttle_factor"] == 0.0 for r in before_fallback), before_fallback
    assert {r["source"] for r in before_fallback} <= {"RETAINED", "OBSERVATION"}
    assert after and after[0]["throttle_factor"] != 1.0, after[:3]


def test_failure_longer_than_validity_gives_the_fallback(story):
    fallback = story["fallback"][1]
    assert fallback["throttle_factor"] == 0.5 and fallback["valid_until"] is None
    assert fallback["status"] == "DESCRIBE_CLUSTER_ERROR"


def test_replay_of_the_journal_reproduces_the_published_decisions(story, spark, tmp_path):
    from quota_pipeline.cli import main

    out = tmp_path / "replayed.jsonl"
    journal = story["work"] / "checkpoint" / "journal"
    assert main(["replay", "--config", str(story["conf"]), "--input", str(journal), "--output", str(out)]) == 0
    replayed = {r["observed_at"]: r for r in map(json.loads, out.read_text().splitlines())}
    published: dict[str, dict] = {}
    for r in story["published"]:
        # A batch killed after publishing is re-run from the journal: same decision, published twice.
        if r["observed_at"] in published:
            assert _decision(published[r["observed_at"]]) == _decision(r)
        published[r["observed_at"]] = r
    assert set(published) <= set(replayed)
    # A tick journaled by the batch that the final stop interrupted may never have been published, nor one the old
    # output broker acknowledged as it was stopped (before the watcher read it).
    lost_from, lost_until = story["outage"]
    assert all(t > max(published) or lost_from < t < lost_until for t in set(replayed) - set(published))
    for t, r in published.items():
        assert _decision(r) == _decision(replayed[t]), t


def _decision(r: dict) -> tuple:
    return (r["throttle_factor"], r["source"], r["valid_until"], r["status"], r["violations"],
            r["missing_brokers"], r["active_log_dirs"])
