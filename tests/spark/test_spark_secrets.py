"""No secret of the configuration reaches what Spark shows: its UI's SQL and environment pages, the event log, the
plan strings, the job's output. The job runs with the UI and the event log on, and still decides."""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.streaming.query import StreamJob
from harness.ports import free_port
from harness.stream_job import TopicWatcher, start_job, stop_job
from tests.support.kafka_fixtures import broker  # noqa: F401
from tests.support.simulator_fixtures import start_simulator  # noqa: F401

JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"qp\" password=\"{}\";"
# Recognisable values without a word Spark's redaction pattern knows (secret, password, token): Spark masks an option
# whose key or value holds one anywhere, so such a value would be masked by luck, not kept out. For the same reason
# no test name (tmp_path) nor cluster name here holds one.
SECRETS = {
    "admin sasl.jaas.config": "Qp7adminJaasXw41",
    "signing key": "Qp7signingKey0123456789abcdefghijkl",
    "output ssl.key.password": "Qp7outputKeyPw93",
    "output sasl.jaas.config": "Qp7outputJaasVb28",
}


def secret_properties(bootstrap: str, output: str, checkpoint: Path) -> dict[str, str]:
    """A config holding each secret where the listeners under PLAINTEXT ignore it (the job still connects)."""
    return {
        cfg.BOOTSTRAP: bootstrap,
        cfg.HARD_RATIO: "0.1",
        cfg.CHECK_INTERVAL_SECONDS: "1",
        cfg.CLUSTER_NAME: "fleet-a",
        cfg.ADMIN_PREFIX + "sasl.jaas.config": JAAS.format(SECRETS["admin sasl.jaas.config"]),
        cfg.SIGNING_KEYS: f"k1:{SECRETS['signing key']}",
        cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers": output,
        cfg.OUTPUT_KAFKA_PREFIX + "ssl.key.password": SECRETS["output ssl.key.password"],
        cfg.OUTPUT_KAFKA_PREFIX + "sasl.jaas.config": JAAS.format(SECRETS["output sasl.jaas.config"]),
        cfg.CHECKPOINT_PATH: str(checkpoint),
    }


def leaks(surfaces: dict[str, str]) -> list[str]:
    return [f"{secret} in {where}" for where, text in surfaces.items() for secret, value in SECRETS.items()
            if value in text]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode(errors="replace")
def test_the_ui_the_event_log_and_the_output_of_a_running_job_show_no_credentials(tmp_path, start_simulator, broker):  # noqa: F811
    sim = start_simulator({"cluster_id": "fleet-a", "brokers": 1, "log_dirs": 1,
                           "defaults": {"total_bytes": 10 ** 12, "used_ratio": 0.5}})
    conf = tmp_path / "fleet-a.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in
                            secret_properties(sim.bootstrap_servers, broker.bootstrap_servers,
                                              tmp_path / "checkpoint").items()))
    events, ui = tmp_path / "events", free_port()
    events.mkdir()
    # How an operator turns the UI and the event log on for `quota-pipeline run` (spark-submit.sh: --conf).
    spark_args = (f"--conf spark.ui.enabled=true --conf spark.ui.port={ui} --conf spark.eventLog.enabled=true "
                  f"--conf spark.eventLog.dir={events.as_uri()} --conf spark.eventLog.compress=false pyspark-shell")
    log = tmp_path / "job.log"
    job = start_job(conf, log, env={"PYSPARK_SUBMIT_ARGS": spark_args})
    watcher = None
    surfaces: dict[str, str] = {}
    try:
        deadline = time.time() + 180
        while watcher is None and time.time() < deadline and job.poll() is None:
            time.sleep(0.5)
            if b"output topic" in log.read_bytes():
                watcher = TopicWatcher(broker.bootstrap_servers, "__quota_throttle_factors")
        assert watcher, f"the job did not start: {log.read_text(errors='replace')[-3000:]}"
        watcher.wait_for(lambda r: r["cluster_id"] == "fleet-a" and r["source"] == "OBSERVATION", 180)
        n = len(watcher.records)
        watcher.wait_for(lambda r: True, 30, since=n)  # one more micro-batch: its plan is on the SQL pages too
        base = f"http://127.0.0.1:{ui}"
        app = json.loads(fetch(f"{base}/api/v1/applications"))[0]["id"]
        api = f"{base}/api/v1/applications/{app}"
        for path in ("/SQL/", "/environment/", "/StreamingQuery/"):
            surfaces[f"UI {path}"] = fetch(base + path)
        surfaces["REST environment"] = fetch(f"{api}/environment")
        surfaces["REST sql"] = fetch(f"{api}/sql?details=true&planDescription=true")
        executions = json.loads(surfaces["REST sql"])
        for e in executions:
            surfaces[f"UI /SQL/execution/?id={e['id']}"] = fetch(f"{base}/SQL/execution/?id={e['id']}")
    finally:
        stop_job(job)
        if watcher is not None:
            watcher.close()
    # The pages show the job's plans (the source's scan, the stateful step), not an empty UI.
    assert any("MicroBatchScan" in e["planDescription"] for e in executions), surfaces["REST sql"][:2000]
    spark_properties = dict(json.loads(surfaces["REST environment"])["sparkProperties"])
    assert (spark_properties["spark.ui.enabled"], spark_properties["spark.eventLog.enabled"]) == ("true", "true")
    for f in (p for p in events.rglob("*") if p.is_file()):
        surfaces[f"event log {f.name}"] = f.read_text(errors="replace")
    assert any("SparkListenerSQLExecutionStart" in t for w, t in surfaces.items() if w.startswith("event log"))
    surfaces["the job's output"] = log.read_text(errors="replace")
    surfaces["the job's log file"] = (tmp_path / "checkpoint" / "run.log").read_text(errors="replace")
    assert not leaks(surfaces)
@pytest.mark.parametrize("only_signing", [False, True], ids=["every-credential", "signing-key-alone"])
def test_the_plan_of_the_jobs_query_shows_no_credentials(spark, tmp_path, only_signing):
    props = secret_properties("127.0.0.1:9", "127.0.0.1:9", tmp_path / "checkpoint")
    if only_signing:  # a PLAINTEXT fleet with signed decisions: no password anywhere for Spark to mask by luck
        props = {k: v for k, v in props.items() if "password" not in k and "jaas" not in k}
    job = StreamJob([cfg.parse(props, str(tmp_path / "fleet-a.properties"))])
    decisions = job.decisions(spark)
    plan = decisions._jdf.queryExecution().toString()  # what explain(True) prints
    assert "kafka_volumes" in plan
    # An analysis error's message carries the plan too (a column the stateful step's output does not have).
    with pytest.raises(Exception) as error:
        decisions.select("no_such_column").schema
    assert "kafka_volumes" in str(error.value)
    assert not leaks({"the query's plan": plan, "an AnalysisException's message": str(error.value)})
