"""The README's main command, `quota-pipeline demo`, shortened: it runs the story and ends with a summary; its
dashboard URL comes first, and the page's event stream shows the throttle within two check intervals. And
`./spark-submit.sh` with the demo config against the demo services."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import javaproperties
from confluent_kafka import Consumer, TopicPartition

from quota_pipeline.core import config as cfg
from quota_pipeline.demo import runner as demo
from tests.ports import free_port
from tests.stream_job import stop_job

ROOT = Path(__file__).resolve().parent.parent

CHECK_INTERVAL = 2.0  # conf/demo.properties


def test_demo_runs_publishes_and_summarises(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "demo", "--duration", "35",
                             "--metrics-port", "0", "--dashboard-port", "0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    drain = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # the pipe never fills
    first = proc.stdout.readline()
    drain.start()
    try:
        assert first.startswith("dashboard: http://127.0.0.1:"), first + proc.stderr.read()
        lag = throttle_lag(first.split()[1])
        err = proc.stderr.read()
        assert proc.wait(300) == 0, "".join(lines)[-3000:] + err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    drain.join(10)
    out = "".join(lines)
    assert "demo summary" in out and "decisions published" in out
    assert "OBSERVATION" in out
    # The disk of broker 3 starts filling at once: within 35 s the factor has left 1.0 (graded throttle).
    assert "throttled (factor < 1) in 0 of them" not in out
    assert lag < 2 * CHECK_INTERVAL
    # A clean terminal: Spark's JVM and workers and librdkafka write to the demo's log file, not here.
    for chatter in (" WARN ", "Python worker", "%3|", "%4|", "incubator"):
        assert chatter not in out + err, chatter


def throttle_lag(url: str) -> float:
    """Seconds from the first throttling decision's decided_at to its arrival on the page's event stream."""
    deadline = time.monotonic() + 120
    while True:
        try:
            stream = urllib.request.urlopen(url + "api/events", timeout=120)
            break
        except OSError:
            assert time.monotonic() < deadline, "the dashboard never answered"
            time.sleep(0.5)
    with stream:
        for line in stream:
            if line.startswith(b"data: "):
                page = json.loads(line[6:])
                throttled = [c for c in page["clusters"] if c.get("record_factor", 1.0) < 1.0]
                if throttled:
                    return time.time() - throttled[0]["decided_at"]
    raise AssertionError("the event stream ended before a throttle")


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
