"""`./spark-submit.sh` with the README's demo config against the demo services: the job publishes decisions, and
its relative paths resolve where it runs."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import javaproperties
from confluent_kafka import Consumer, TopicPartition

from quota_pipeline.core import config as cfg
from quota_pipeline.demo import runner as demo
from harness.ports import free_port
from harness.stream_job import stop_job

ROOT = Path(__file__).resolve().parents[2]


def test_spark_submit_runs_the_demo_config(tmp_path):
    # The demo's services take its fixed ports when they are free, else any; the job then gets the demo config
    # with the ports they really have, so a busy port on the test machine cannot fail the test.
    services = demo.DemoServices(forever=True).start()
    props = cfg.read_properties(ROOT / "conf" / "demo.properties")
    props[cfg.BOOTSTRAP] = services.sim.bootstrap_servers
    props[cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers"] = services.broker.bootstrap_servers
    props[cfg.METRICS_PORT] = str(free_port())
    conf = tmp_path / "demo.properties"
    with conf.open("w") as f:
        javaproperties.dump(props, f, timestamp=False)
    log = tmp_path / "spark-submit.log"
    job = subprocess.Popen([str(ROOT / "spark-submit.sh"), "--driver-memory", "1g", str(conf)],
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
        stop_job(job)
        services.stop()
    assert len(records) >= 3, log.read_text()[-3000:]
    assert {r["cluster_id"] for r in records} == {"demo-cluster"}
    assert (tmp_path / "checkpoints" / "demo" / "journal").is_dir()  # relative paths resolve where it runs
