"""observe, quotas and enforce through the SCRAM-SHA-512 and SSL listeners of Apache Kafka from KAFKA_HOME, with
client settings written as a Kafka operator writes them; a refused login or certificate is one error line naming
the listener; no password or key material in any output, log line or file the commands write."""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.enforce.plan import DEFAULT_THROTTLE_FLOOR
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE, Entity
from quota_pipeline.kafka.publisher import ensure_topic
from quota_pipeline.kafka.quota_admin import QuotaAdmin
from harness import kafka_config as rc
from harness.kafka import RealKafka
from harness.kafka_props import (
    client_properties, pipeline_properties, prefixed, publish_decisions, restore_quotas, wait_for,
    write_properties,
)

WRONG = f"wrong-{uuid.uuid4().hex}"
KEY_MARKERS = ("PRIVATE KEY", "BEGIN CERTIFICATE")


def cli(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    """`quota-pipeline ARGS` as an operator runs it: its exit code, stdout and stderr."""
    done = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def assert_no_secrets(cluster: RealKafka, *texts: str) -> None:
    for text in texts:
        for secret in (cluster.scram_password, WRONG, *KEY_MARKERS):
            assert secret not in text, f"{secret!r} appears in:\n{text[-3000:]}"


def one_error_line(err: str, listener: str) -> str:
    """The stderr of a refused command: its last line is the error, naming host:port; no traceback anywhere."""
    assert "Traceback" not in err, err
    assert "|FAIL|" not in err, err  # librdkafka's own lines, written from its threads, after the error line too
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and listener in last, err
    return last


@pytest.fixture
def files(real_kafka: RealKafka, tmp_path: Path) -> dict[str, str]:
    """Configurations observing through SCRAM or SSL (decisions over SSL), and ones with a wrong secret."""
    def write(name: str, listener: str, password: str | None = None, output: str = rc.SSL,
              output_password: str | None = None) -> str:
        props = pipeline_properties(real_kafka, listener, password, **{
            cfg.CLUSTER_NAME: "secure", cfg.OUTPUT_TOPIC: f"secure-{tmp_path.name[-12:]}",
            cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint")},
            **prefixed(cfg.OUTPUT_KAFKA_PREFIX, client_properties(real_kafka, output, output_password)))
        return str(write_properties(tmp_path / f"{name}.properties", props))
    paths = {"scram": write("scram", rc.SASL), "ssl": write("ssl", rc.SSL),
             "wrong-password": write("wrong-password", rc.SASL, WRONG),
             "wrong-output-password": write("wrong-output-password", rc.SSL, output=rc.SASL, output_password=WRONG)}
    no_ca = {k: v for k, v in pipeline_properties(real_kafka, rc.SSL).items() if "truststore" not in k}
    paths["untrusted"] = str(write_properties(tmp_path / "untrusted.properties", no_ca))
    return paths


def test_observe_and_quotas_work_through_scram_and_ssl(real_kafka: RealKafka, files: dict[str, str]):
    user = f"secure-{uuid.uuid4().hex[:6]}"
    with QuotaAdmin(client_properties(real_kafka)) as admin:
        before = admin.describe()
        try:
            runs = [cli("observe", files["scram"], "-v"), cli("observe", files["ssl"]),
                    cli("quotas", "set", "--config", files["ssl"], "--user", user, "--producer-byte-rate", "4096")]
            wait_for(lambda: Entity.of(user) in admin.describe(), 10, "the quota set over SSL is shown")
            runs += [cli("quotas", "list", "--config", files["scram"], "--json"),
                     cli("quotas", "explain", "--config", files["ssl"], "--user", user, "--client-id", "x", "--json"),
                     cli("quotas", "delete", "--config", files["scram"], "--user", user)]
        finally:
            restore_quotas(admin, before)
    for code, out, err in runs:
        assert code == 0 and "Traceback" not in err, err
        assert_no_secrets(real_kafka, out, err)
    for code, out, _ in runs[:2]:
        snapshot = json.loads(out)
        assert snapshot["status"] == "SUCCESS" and snapshot["brokers"] == [1] and len(snapshot["volumes"]) == 2
    assert "'sasl_plain_password': ******" in runs[0][2], "kafka-python logs its configuration at debug level"
    listed = {json.dumps(e["entity"]): e["values"] for e in json.loads(runs[3][1])["entities"]}
    assert listed[json.dumps({"user": user})][PRODUCER_BYTE_RATE] == 4096.0
    assert json.loads(runs[4][1])["effective"][PRODUCER_BYTE_RATE] == {"value": 4096.0, "level": "user"}


def test_a_refused_login_or_certificate_is_one_error_line_naming_the_listener(real_kafka: RealKafka,
                                                                               files: dict[str, str]):
    scram, ssl = real_kafka.bootstrap(rc.SASL), real_kafka.bootstrap(rc.SSL)
    commands = [(["observe", files["wrong-password"]], 3, scram),
                (["quotas", "list", "--config", files["wrong-password"]], 1, scram),
                (["enforce", files["wrong-password"], "--once", "--stop", "throttle"], 1, scram),
                (["enforce", files["wrong-output-password"], "--once", "--stop", "throttle"], 1, scram),
                (["run", files["wrong-output-password"], "--no-metrics"], 1, scram),
                (["observe", files["untrusted"]], 3, ssl),
                (["quotas", "list", "--config", files["untrusted"]], 1, ssl)]
    with ThreadPoolExecutor(3) as pool:
        runs = list(pool.map(lambda c: cli(*c[0]), commands))
    for (args, expected_code, listener), (code, out, err) in zip(commands, runs):
        assert code == expected_code, (args, err)
        last = one_error_line(err, listener)
        assert_no_secrets(real_kafka, out, err)
        if listener == scram:
            assert "refused the login" in last and "sasl.jaas.config" in last, last
        else:
            assert "certificate verify failed" in last and "ssl.truststore.location" in last, last


def test_enforce_throttles_and_restores_through_scram_and_ssl(real_kafka: RealKafka, files: dict[str, str],
                                                              tmp_path: Path):
    """The enforcer changes quotas over the SCRAM listener and follows decisions over the SSL one."""
    conf = cfg.load(files["scram"])
    ensure_topic(client_properties(real_kafka), conf.output_topic)
    baseline_file = Path(conf.checkpoint_path) / "enforce" / "secure.json"
    floor = Entity.of(default_user=True, default_client_id=True)  # factor 0: the floor on a new quota window
    log = tmp_path / "enforce.log"
    with QuotaAdmin(client_properties(real_kafka)) as admin, log.open("w") as out:
        before = admin.describe()
        job = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "enforce", files["scram"], "--interval",
                                "1", "-v", "--stop", "throttle"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            now = dt.datetime.now(dt.timezone.utc)
            publish_decisions(real_kafka, conf.output_topic, [("secure", 0.0, now)])
            wait_for(lambda: admin.describe().get(floor) == {PRODUCER_BYTE_RATE: DEFAULT_THROTTLE_FLOOR}, 30,
                     "the throttle")
            assert_no_secrets(real_kafka, baseline_file.read_text())
            publish_decisions(real_kafka, conf.output_topic, [("secure", 1.0, now + dt.timedelta(seconds=1))])
            wait_for(lambda: not baseline_file.exists(), 30, "the restore deletes the baseline file")
            assert admin.describe() == before
            os.killpg(job.pid, signal.SIGTERM)
            assert job.wait(20) == 0
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(10)
            restore_quotas(admin, before)
    text = log.read_text()
    assert "factor 0: throttle" in text and "factor 1: restore" in text and "Traceback" not in text, text[-3000:]
    assert_no_secrets(real_kafka, text)
