"""The streaming job as a separate process (`quota-pipeline run`), and a watcher of the topic it publishes to."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping

from confluent_kafka import Consumer, TopicPartition

from harness.kafka_process import renice_session


class TopicWatcher:
    """Follows the decision topic from offset 0 and keeps (arrival time, record) pairs."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.records: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-watcher",
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _assign(self) -> bool:
        """Every partition, from the beginning, once the topic exists (a broker may create it with several)."""
        metadata = self._consumer.list_topics(self._topic, timeout=2).topics.get(self._topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return False
        self._consumer.assign([TopicPartition(self._topic, p, 0) for p in sorted(metadata.partitions)])
        return True

    def _run(self) -> None:
        while not self._stop.is_set() and not self._assign():
            time.sleep(0.5)
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is not None and not msg.error():
                self.records.append((time.time(), json.loads(msg.value())))

    def wait_for(self, predicate, timeout: float, since: int = 0) -> tuple[float, dict]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for arrived, rec in self.records[since:]:
                if predicate(rec):
                    return arrived, rec
            time.sleep(0.1)
        tail = [(r["observed_at"], r["throttle_factor"], r["source"], r["status"]) for _, r in self.records[-8:]]
        raise AssertionError(f"no matching decision within {timeout}s; last records: {tail}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def start_job(conf_path: Path, log: Path, metrics: bool = False, log_batches: bool = False,
              priority: int = 0, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """`quota-pipeline run CONF` in its own session; with `metrics`, serving the config's metrics port; with
    `log_batches`, a line per micro-batch of where its time went; `priority` added to the job's niceness (negative:
    ahead of the brokers, as a job on a host of its own is; root only); `env` added to its environment."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})}
    options = [*([] if metrics else ["--no-metrics"]), *(["--log-batches"] if log_batches else [])]
    return subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "run", str(conf_path), *options,
                             "--master", "local[2]"], stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
                            cwd=conf_path.parent, start_new_session=True,
                            preexec_fn=(lambda: renice_session(priority)) if priority else None)


def stop_job(job: subprocess.Popen | None, grace: float = 30.0) -> None:
    """Stop a job started in its own session, as a service manager would: SIGTERM to its process group, then
    SIGKILL what is left after `grace` seconds."""
    if job is None or job.poll() is not None:
        return
    os.killpg(job.pid, signal.SIGTERM)
    try:
        job.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(10)
