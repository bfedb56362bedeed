"""Changing the fleet: a cluster's config added to --clusters-dir and another removed, the job restarted.

Every other cluster keeps its state across the restart from the same checkpoint (a throttle in force stays in
force, even while its polls fail), the new cluster is polled from the first micro-batch, and the removed
cluster's state is dropped with a log line naming it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import parse_time
from quota_pipeline.demo.local_broker import LocalBroker
from quota_pipeline.simulator import Simulator
from harness.stream_job import TopicWatcher

TOTAL = 10 ** 12
TOPIC = "__quota_throttle_factors"
ROOT = Path(__file__).resolve().parents[2]


def start_job(fleet: Path, log: Path) -> subprocess.Popen:
    """`quota-pipeline run --clusters-dir FLEET` as an operator starts it (the package from this checkout)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "run", "--clusters-dir", str(fleet),
                             "--no-metrics", "--master", "local[2]"], stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            env=env, cwd=log.parent, start_new_session=True)


def write_config(directory: Path, name: str, sim: Simulator, broker: LocalBroker, work: Path) -> None:
    (directory / f"{name}.properties").write_text("\n".join([
        f"{cfg.HARD_RATIO}=0.1", f"{cfg.CHECK_INTERVAL_SECONDS}=1", f"{cfg.VALIDITY}=PT5M",
        f"{cfg.BOOTSTRAP}={sim.bootstrap_servers}", f"{cfg.ADMIN_PREFIX}request.timeout.ms=700",
        f"{cfg.CLUSTER_NAME}={name}", f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
        f"{cfg.CHECKPOINT_PATH}={work / 'checkpoint'}"]) + "\n")


def wait_for_log(log: Path, text: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while text.encode() not in log.read_bytes():
        assert time.time() < deadline, f"no {text!r} in the job's log within {timeout}s: {log.read_text()[-3000:]}"
        time.sleep(0.3)


def test_adding_and_removing_a_cluster_keeps_every_other_clusters_state(tmp_path):
    sims = {n: Simulator({"cluster_id": n, "brokers": 2, "log_dirs": 1,
                          "defaults": {"total_bytes": TOTAL, "used_ratio": 0.5}}, port=0) for n in ("stays", "goes", "comes")}
    fleet = tmp_path / "clusters"
    fleet.mkdir()
    log = tmp_path / "job.log"
    broker = job = watcher = None
    try:
        for s in sims.values():
            s.start()
        sims["stays"].state.set_available(2, 0, TOTAL * 0.05)  # throttled from its first observation
        broker = LocalBroker(log_path=tmp_path / "tansu.log").start()
        for name in ("stays", "goes"):
            write_config(fleet, name, sims[name], broker, tmp_path)
        job = start_job(fleet, log)
        wait_for_log(log, "output topic", 60)
        watcher = TopicWatcher(broker.bootstrap_servers, TOPIC)
        # Generous: the first micro-batch starts the JVM's Python workers, slow on a busy machine (about 20 s idle).
        watcher.wait_for(lambda r: r["cluster_id"] == "stays" and r["throttle_factor"] == 0.0, 300)
        _, first = watcher.wait_for(lambda r: r["cluster_id"] == "goes", 10)
        # A batch commits its state after publishing and the next one starts after that commit, so a later record
        # of "goes" means its state is in the checkpoint (a kill before that once left no state to drop).
        watcher.wait_for(lambda r: r["cluster_id"] == "goes" and r["observed_at"] > first["observed_at"], 30)
        os.killpg(job.pid, signal.SIGKILL)  # as a crash would; a committed batch's state is in the checkpoint
        job.wait(10)

        # From now on every poll of "stays" fails: only its state in the checkpoint can keep the throttle.
        sims["stays"].state.add_fault({"type": "describe_cluster_error"})
        faulted = time.time()
        (fleet / "goes.properties").unlink()
        write_config(fleet, "comes", sims["comes"], broker, tmp_path)
        restarted = len(watcher.records)
        job = start_job(fleet, log)
        watcher.wait_for(lambda r: r["cluster_id"] == "comes", 300, since=restarted)
        wait_for_log(log, "goes: dropped the decision state", 30)
        # A failed poll's record (not the re-run of the batch the kill interrupted, polled before the fault).
        watcher.wait_for(lambda r: r["cluster_id"] == "stays" and r["status"] == "DESCRIBE_CLUSTER_ERROR", 15,
                         since=restarted)
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(10)
        if watcher:
            watcher.close()
        if broker:
            broker.stop()
        for s in sims.values():
            s.stop()
    after = [r for _, r in watcher.records[restarted:]]
    stays = [r for r in after if r["cluster_id"] == "stays"]
    # The restarted job first re-runs the batch the kill interrupted, from the journal: a poll of "stays" made before
    # the fault is decided again as it was (a throttle, observed). Every poll after the fault failed.
    assert stays and all(r["throttle_factor"] == 0.0 for r in stays), stays
    failed = [(r["throttle_factor"], r["source"], r["status"]) for r in stays
              if parse_time(r["observed_at"]).timestamp() > faulted]
    # With its state lost, the first failed poll would have published the initial 1.0.
    assert failed and set(failed) == {(0.0, "RETAINED", "DESCRIBE_CLUSTER_ERROR")}, stays
    comes = [r for r in after if r["cluster_id"] == "comes"]
    assert (comes[0]["throttle_factor"], comes[0]["source"]) == (1.0, "OBSERVATION")
    assert not [r for r in after if r["cluster_id"] == "goes"]
    text = log.read_text()
    assert "goes: no longer in the fleet" in text and "comes: new in the fleet" in text
    assert "goes: dropped the decision state of cluster goes" in text

