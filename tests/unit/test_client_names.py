"""Misspelled Kafka client settings (kafka.admin.*, output.kafka.*) warn with a suggestion; the names known come
from the kafka-clients jar (regenerated and compared here when KAFKA_HOME is set)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from quota_pipeline import resources
from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg

ROOT = Path(__file__).resolve().parents[2]
BASE = ("client.quota.callback.static.kafka.admin.bootstrap.servers=k:9092\n"
        "client.quota.callback.static.storage.per.volume.limit.min.available.bytes=100\n")


def test_validate_warns_on_client_settings_no_kafka_client_knows(tmp_path, capsys):
    path = tmp_path / "c.properties"
    path.write_text(BASE +
                    'client.quota.callback.static.kafka.admin.sasl.jaas.confg=PlainLoginModule required password="hunter2";\n'
                    "client.quota.callback.static.kafka.admin.ssl.key.pem=-----BEGIN PRIVATE KEY-----abc\n"
                    "quota.pipeline.output.kafka.bootstrap.server=out:9092\n"
                    "quota.pipeline.output.kafka.security.protocol=SSL\n"
                    "client.quota.callback.static.kafka.admin.ssl.cafile=/ca.pem\n"        # the Python clients' PEM name
                    "client.quota.callback.static.kafka.admin.request.timeout.ms=5000\n")
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert ("warning: client.quota.callback.static.kafka.admin.sasl.jaas.confg: no Kafka client knows this setting, "
            "ignored; did you mean client.quota.callback.static.kafka.admin.sasl.jaas.config?") in warnings
    assert ("warning: quota.pipeline.output.kafka.bootstrap.server: no Kafka client knows this setting, ignored; "
            "did you mean quota.pipeline.output.kafka.bootstrap.servers?") in warnings
    assert any(w.startswith("warning: client.quota.callback.static.kafka.admin.ssl.key.pem: no Kafka client") for w in warnings)
    assert len(warnings) == 3  # security.protocol, ssl.cafile and request.timeout.ms are known
    assert "hunter2" not in captured.out + captured.err and "abc" not in captured.out + captured.err


def test_a_config_with_only_known_client_settings_has_no_warning():
    conf = cfg.parse({cfg.HARD_BYTES: "1", cfg.BOOTSTRAP: "k:9092", cfg.ADMIN_PREFIX + "sasl.mechanism": "PLAIN",
                      cfg.ADMIN_PREFIX + "ssl.keystore.key": "x", "quota.pipeline.output.kafka.acks": "all",
                      "quota.pipeline.output.kafka.linger.ms": "5"})
    assert conf.warnings == ()


@pytest.mark.skipif(not os.environ.get("KAFKA_HOME"), reason="needs KAFKA_HOME (the kafka-clients jar)")
def test_the_known_names_are_those_of_the_kafka_clients_jar():
    libs = Path(os.environ["KAFKA_HOME"]) / "libs"
    out = subprocess.run(["java", "-cp", f"{libs}/*", str(ROOT / "tools" / "KafkaClientConfigs.java")],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    stored = resources.path("kafka_client_configs.txt").read_text(encoding="utf-8")
    assert out == stored, ("kafka_client_configs.txt differs from the jar in KAFKA_HOME: regenerate it with "
                           "java -cp \"$KAFKA_HOME/libs/*\" tools/KafkaClientConfigs.java")
