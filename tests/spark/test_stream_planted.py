"""The streaming job against a planted journal, end to end: the real query (kafka_volumes source polling a simulator,
the stateful decision) in the test session's Spark, its records collected instead of published.

A cluster's disk is full. Someone who can write the journal plants valid tick files, every volume healthy, for the
ticks to come. The job must publish the real decision (0.0) for each of those ticks, from its own polls, and keep
the planted files aside unused. And the other side of the rule: a micro-batch that fails after journaling is re-run
from the checkpoint with the journaled snapshots, not polled again."""
from __future__ import annotations

import datetime as dt
import json
import threading
import time
from dataclasses import replace

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.journal import layout, ownership
from quota_pipeline.simulator import Simulator
from quota_pipeline.streaming import source
from quota_pipeline.streaming.query import StreamJob

GB = 10 ** 9
TOTAL = 100 * GB


class Collect:
    """The publisher's place: keeps what each micro-batch would publish; fails the batches listed in `fail`."""

    def __init__(self, fail: tuple[int, ...] = ()) -> None:
        self.calls = 0
        self.fail = fail
        self.failed: list[list[dict]] = []
        self.published: list[list[dict]] = []

    def publish(self, pairs) -> None:
        records = [json.loads(value) for _, value in pairs]
        self.calls += 1
        if self.calls in self.fail:
            self.failed.append(records)
            raise RuntimeError("the output cluster did not acknowledge (test)")
        self.published.append(records)

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        pass


def config(tmp_path, sim: Simulator) -> cfg.Config:
    return cfg.parse({
        cfg.HARD_RATIO: "0.1", cfg.CHECK_INTERVAL_ISO: "PT1S", cfg.VALIDITY: "PT30S",
        cfg.BOOTSTRAP: sim.bootstrap_servers, cfg.ADMIN_PREFIX + "request.timeout.ms": "700",
        cfg.CLUSTER_NAME: "full", cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint"),
        cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers": "127.0.0.1:1",  # never reached: Collect publishes
    })


def run_job(spark, monkeypatch, conf: cfg.Config, publisher: Collect, until, timeout: float = 240) -> None:
    job = StreamJob([conf])
    job._publisher = publisher
    monkeypatch.setattr(job, "spark_session", lambda: spark)
    monkeypatch.setattr(job, "prepare_output", lambda: conf.output_topic)      # no output cluster to ensure
    monkeypatch.setattr("quota_pipeline.streaming.query.Publisher", lambda *a, **k: publisher)  # after a restart
    runner = threading.Thread(target=job.run, kwargs={"max_restarts": 3}, daemon=True)
    runner.start()
    try:
        deadline = time.time() + timeout
        while not until() and time.time() < deadline and runner.is_alive():
            time.sleep(0.2)
        assert until(), f"the job did not get there within {timeout} s: {publisher.published[-3:]}"
    finally:
        job.request_stop()
        runner.join(90)


@pytest.fixture
def full_cluster():
    sim = Simulator({"cluster_id": "full", "brokers": 2, "log_dirs": 1,
                     "defaults": {"total_bytes": TOTAL, "available_bytes": 50 * GB}}, port=0).start()
    sim.state.set_available(1, 0, TOTAL * 0.02)  # below the 10 % hard limit: the real decision is 0.0
    try:
        yield sim
    finally:
        sim.stop()


def test_planted_tick_files_for_future_ticks_are_set_aside_and_the_real_decision_is_published(
        spark, tmp_path, monkeypatch, full_cluster):
    from quota_pipeline.kafka.observer import poll_once

    conf = config(tmp_path, full_cluster)
    real = poll_once(conf)
    assert real.status.value == "SUCCESS" and len(real.volumes) == 2, real
    journal = tmp_path / "checkpoint" / "journal" / "full"
    now = source.current_tick(conf, dt.datetime.now(dt.timezone.utc))
    planted = {}
    for tick in range(now + 1, now + 900):  # every tick of the next 15 minutes: all disks fine, all brokers there
        at = source.tick_time(conf, tick)
        fine = replace(real, observed_at=at, volumes=tuple(
            replace(v, available_bytes=int(v.total_bytes * 0.9)) for v in real.volumes))
        path = journal / layout.tick_file(tick, at)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(fine.to_json()) + "\n")
        planted[tick] = path
    publisher = Collect()

    def enough() -> bool:  # a few micro-batches past the first, all on planted ticks
        return sum(len(b) for b in publisher.published) >= 5

    run_job(spark, monkeypatch, conf, publisher, enough)
    records = [r for batch in publisher.published for r in batch]
    assert [r["throttle_factor"] for r in records] == [0.0] * len(records), records
    planted_times = {json.loads(p.with_name(p.name + ".rejected-1").read_text())["observed_at"]
                     for p in planted.values() if p.with_name(p.name + ".rejected-1").exists()}
    assert len(planted_times) >= len(records) - 1, (len(planted_times), len(records))  # the first tick may precede
    assert not planted_times & {r["observed_at"] for r in records}
    for tick, path in planted.items():
        aside = path.with_name(path.name + ".rejected-1")
        if aside.exists():  # set aside: the tick file in its place is the job's own poll of the full disk
            own = json.loads(path.read_text())
            assert ownership.TOKEN_FIELD in own and own["observed_at"] not in planted_times
            assert min(v["available_bytes"] for v in own["volumes"]) < 0.1 * TOTAL


def test_a_failed_micro_batch_is_re_run_from_the_journal_not_polled_again(spark, tmp_path, monkeypatch, full_cluster):
    conf = config(tmp_path, full_cluster)
    publisher = Collect(fail=(3,))
    run_job(spark, monkeypatch, conf, publisher, lambda: len(publisher.published) >= 4)
    [failed] = publisher.failed
    assert failed, "the failed batch had no decision"
    rerun = publisher.published[2]  # the batch after the two that succeeded: the failed one, run again
    assert [r["observed_at"] for r in rerun] == [r["observed_at"] for r in failed]
    assert [r["throttle_factor"] for r in rerun] == [r["throttle_factor"] for r in failed]
    # Taken from the journal as the job's own: nothing was set aside, and the batches after it polled anew.
    assert not list((tmp_path / "checkpoint" / "journal").rglob(f"*{ownership.ASIDE_INFIX}*"))
    assert publisher.published[3][0]["observed_at"] > rerun[0]["observed_at"]
