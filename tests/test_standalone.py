"""The streaming job on a Spark standalone cluster: a master and two workers on loopback, `./spark-submit.sh --master`.

Run alone with `python3 -m pytest -q -m standalone`. Executors in their own processes import the package from the
zip spark-submit.sh ships, poll the simulated clusters, journal and keep state on a path all of them share.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.demo.local_broker import LocalBroker
from tests.ports import free_port
from quota_pipeline.simulator import Simulator
from standalone_cluster import StandaloneCluster
from tests.realkafka import ready_timeout
from tests.stream_job import TopicWatcher, stop_job

pytestmark = pytest.mark.standalone

ROOT = Path(__file__).resolve().parent.parent
TOTAL = 10 ** 12


def write_config(path: Path, sim: Simulator, broker: LocalBroker, shared: Path) -> None:
    path.write_text("\n".join([
        f"{cfg.HARD_RATIO}=0.1", f"{cfg.CHECK_INTERVAL_SECONDS}=1", f"{cfg.VALIDITY}=PT1M",
        f"{cfg.BOOTSTRAP}={sim.bootstrap_servers}", f"{cfg.CLUSTER_NAME}={path.stem}",
        f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
        f"{cfg.CHECKPOINT_PATH}={shared / 'checkpoint'}", f"{cfg.JOURNAL_PATH}={shared / 'journal'}",
        f"{cfg.METRICS_PORT}={free_port()}"]) + "\n")


def test_the_job_runs_on_a_standalone_cluster_with_two_workers(tmp_path):
    shared = tmp_path / "shared"  # the journal and the checkpoint: every executor and the driver see this path
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    sims = [Simulator({"cluster_id": name, "brokers": 2, "log_dirs": 1,
                       "defaults": {"total_bytes": TOTAL, "used_ratio": 0.5}}, port=0) for name in ("east", "west")]
    broker = job = watcher = None
    log = tmp_path / "job.log"
    spark = StandaloneCluster(tmp_path / "spark", workers=2, cores=1, memory="1g")
    # The JVMs start slowly on a busy machine: the daemons, the broker and the job start side by side (the
    # application retries its registration until the master is up).
    spark.start(wait=False)
    try:
        for sim in sims:
            sim.start()
        sims[1].state.set_available(2, 0, TOTAL * 0.05)  # west: a disk past the hard limit
        broker = LocalBroker(log_path=tmp_path / "tansu.log").start()
        for name, sim in zip(("east", "west"), sims):
            write_config(clusters / f"{name}.properties", sim, broker, shared)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        job = subprocess.Popen(
            [str(ROOT / "spark-submit.sh"), "--master", spark.master_url, "--executor-memory", "512m",
             "--driver-memory", "1g", "--conf", "spark.executor.cores=1", "--clusters-dir", str(clusters)],
            cwd=tmp_path, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        spark.wait_for_workers(60)
        deadline = time.time() + 60
        while watcher is None and time.time() < deadline and job.poll() is None:
            time.sleep(0.3)
            if b"output topic" in log.read_bytes():
                watcher = TopicWatcher(broker.bootstrap_servers, "__quota_throttle_factors")
        assert watcher, f"the job did not start: {log.read_text()[-3000:]}"
        # The first micro-batch starts Python workers and the state store on both executors: slow on a busy machine.
        watcher.wait_for(lambda r: r["cluster_id"] == "west" and r["throttle_factor"] == 0.0, ready_timeout(90))
        watcher.wait_for(lambda r: r["cluster_id"] == "east" and r["throttle_factor"] == 1.0
                         and r["source"] == "OBSERVATION", 10)
        apps = spark.state()["activeapps"]
    finally:
        stop_job(job)
        if watcher:
            watcher.close()
        if broker:
            broker.stop()
        for sim in sims:
            sim.stop()
        spark.stop()
    executor_logs = [p.read_text(errors="replace") for p in spark.executor_logs()]
    shipped = list(spark.work.glob("worker-*/app-*/*/quota_pipeline.zip"))
    west = [r for _, r in watcher.records if r["cluster_id"] == "west"]
    assert all(r["throttle_factor"] == 0.0 and r["violations"] == 1 for r in west), west[:3]
    assert [a["name"] for a in apps] == ["quota-pipeline-stream"] and apps[0]["cores"] == 2, apps
    # Both workers ran an executor, which fetched the package spark-submit.sh ships, and tasks ran there.
    assert len(shipped) == 2, shipped
    assert any("Running task" in text for text in executor_logs), executor_logs
    for name in ("east", "west"):
        # Per-tick files, or the hour's Parquet file once an hour boundary passed during the test (compaction).
        journaled = [*(shared / "journal" / name).glob("*/*.json"), *(shared / "journal" / name).glob("*/*.parquet")]
        assert journaled, f"nothing journaled for {name}"
    assert (shared / "checkpoint" / "query" / "commits").is_dir()
