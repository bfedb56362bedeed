"""`./spark-submit.sh conf/demo.properties` runs the streaming job against the demo services."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from quota_pipeline.demo import runner as demo

ROOT = Path(__file__).resolve().parent.parent


def test_spark_submit_runs_the_demo_config(tmp_path):
    if not (demo._port_free(demo.SIM_PORT, 6) and demo._port_free(demo.BROKER_PORT) and demo._port_free(9404)):
        pytest.fail("conf/demo.properties needs ports 29092-29097, 29192 and 9404 free; something else uses them")
    services = demo.DemoServices(forever=True).start()
    log = tmp_path / "spark-submit.log"
    job = subprocess.Popen([str(ROOT / "spark-submit.sh"), "--driver-memory", "1g", str(ROOT / "conf" / "demo.properties")],
                           cwd=tmp_path, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    records = []
    try:
        deadline = time.time() + 180
        consumer = None
        while len(records) < 3 and time.time() < deadline and job.poll() is None:
            if consumer is None:
                if b"output topic" not in log.read_bytes():
                    time.sleep(0.5)
                    continue
                consumer = Consumer({"bootstrap.servers": services.broker.bootstrap_servers, "group.id": "t",
                                     "enable.auto.commit": False})
                consumer.assign([TopicPartition("__quota_throttle_factors", 0, 0)])
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                records.append(json.loads(msg.value()))
        if consumer:
            consumer.close()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
        services.stop()
    assert len(records) >= 3, log.read_text()[-3000:]
    assert {r["cluster_id"] for r in records} == {"demo-cluster"}
    assert (tmp_path / "checkpoints" / "demo" / "journal").is_dir()  # relative paths resolve where it runs
