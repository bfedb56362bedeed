"""Strimzi-compatible configuration: syntax, defaults, validation, masking, and `validate`."""
from __future__ import annotations

import datetime as dt

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.cli import main

BOOT = "client.quota.callback.static.kafka.admin.bootstrap.servers=k1:9092, k2:9092\n"
HARD = "client.quota.callback.static.storage.per.volume.limit.min.available.bytes=1000\n"


def write(tmp_path, text: str):
    p = tmp_path / "c.properties"
    p.write_text(text)
    return str(p)


def test_defaults_match_the_contract(tmp_path):
    c = cfg.load(write(tmp_path, BOOT + HARD))
    assert c.check_interval == dt.timedelta(seconds=60)
    assert c.validity == dt.timedelta(minutes=5)
    assert c.fallback_factor == 1.0 and c.offline_policy == "pin"
    assert c.produce is None and c.excluded_principals == ()
    assert c.limits.hard == cfg.Limit("bytes", 1000) and c.limits.soft is None
    assert c.bootstrap_servers == "k1:9092,k2:9092"
    assert c.output_topic == "__quota_throttle_factors" and c.metrics_port == 9404
    assert c.effective_journal_path.endswith("checkpoints/journal")


def test_java_properties_syntax(tmp_path):
    text = ("# comment\n! also a comment\n"
            "client.quota.callback.static.kafka.admin.bootstrap.servers : a:1,\\\n    b:2\n"
            "client.quota.callback.static.storage.per.volume.limit.min.available.ratio 0.1\n"
            "client.quota.callback.static.excluded.principal.name.list=User:CN\\=me,O\\=x;User:bob\n")
    c = cfg.load(write(tmp_path, text))
    assert c.bootstrap_servers == "a:1,b:2"
    assert c.limits.hard == cfg.Limit("ratio", 0.1)
    assert c.excluded_principals == ("User:CN=me,O=x", "User:bob")


@pytest.mark.parametrize("line, interval", [
    ("storage.check-interval=15", dt.timedelta(seconds=15)),
    ("storage.check.interval=PT2M", dt.timedelta(minutes=2)),
    ("storage.check.interval=PT0S", dt.timedelta(0)),
])
def test_both_check_interval_forms(tmp_path, line, interval):
    c = cfg.load(write(tmp_path, BOOT + HARD + "client.quota.callback.static." + line + "\n"))
    assert c.check_interval == interval


def problems(tmp_path, text: str) -> list[str]:
    with pytest.raises(cfg.ConfigError) as exc:
        cfg.load(write(tmp_path, text))
    return [str(p) for p in exc.value.problems]


def test_both_interval_forms_is_an_error(tmp_path):
    out = problems(tmp_path, BOOT + HARD + "client.quota.callback.static.storage.check-interval=10\n"
                   "client.quota.callback.static.storage.check.interval=PT10S\n")
    assert len(out) == 1 and "set only one of" in out[0]


def test_all_problems_reported_together(tmp_path):
    out = problems(tmp_path, "client.quota.callback.static.throttle.factor.validity.duration=P1M\n"
                   "client.quota.callback.static.storage.check-interval=abc\n"
                   "client.quota.callback.static.storage.offline.log.dir.policy=ignore\n"
                   "quota.pipeline.metrics.port=70000\n")
    joined = "\n".join(out)
    for key in ("validity.duration", "check-interval", "offline.log.dir.policy", "metrics.port",
                "kafka.admin.bootstrap.servers", "a hard limit is required"):
        assert key in joined
    assert all(line.startswith("error: ") for line in out)


def test_soft_limit_must_be_less_restrictive(tmp_path):
    out = problems(tmp_path, BOOT + HARD + "client.quota.callback.static.storage.per.volume.soft.limit."
                   "min.available.bytes=500\n")
    assert "soft limit must leave more space" in out[0]


def test_unknown_property_warns_with_suggestion(tmp_path):
    c = cfg.load(write(tmp_path, BOOT + HARD + "client.quota.callback.static.throttle.factor.fallbak=0.5\n"
                       "broker.id=3\n"))
    assert c.warnings == ("warning: client.quota.callback.static.throttle.factor.fallbak: unknown property, "
                          "ignored; did you mean client.quota.callback.static.throttle.factor.fallback?",)


def test_excluded_client_ids_are_deprecated_and_ignored(tmp_path, capsys):
    path = write(tmp_path, BOOT + HARD + "quota.pipeline.excluded.client.ids=quota-pipeline-publisher\n"
                 "quota.pipeline.stop.scope=cluster\nquota.pipeline.stop.authorizer.delegate=none\n")
    c = cfg.load(path)
    assert c.stop_scope == "cluster" and c.stop_authorizer_delegate == "none"
    assert len(c.warnings) == 1 and c.warnings[0].startswith(
        "warning: quota.pipeline.excluded.client.ids is deprecated and ignored: a client chooses its own id")
    main(["validate", path])
    assert "quota.pipeline.excluded.client.ids is deprecated and ignored" in capsys.readouterr().err


def test_validate_says_which_stop_the_brokers_apply(tmp_path, capsys):
    main(["validate", "--offline", write(tmp_path, BOOT + HARD)])
    out = capsys.readouterr().out
    assert "# at factor 0 writes are not refused: the quota throttle's floor gives each client 24966 bytes/s per broker" in out
    main(["validate", "--offline", write(tmp_path, BOOT + HARD + "authorizer.class.name="
                                     "io.quotapipeline.callback.StopAuthorizer\nquota.pipeline.stop.scope=cluster\n")])
    out = capsys.readouterr().out
    assert "# at factor 0 the brokers' StopAuthorizer refuses the writes to every topic" in out
    assert "the quota throttle's floor gives each client" not in out
    main(["validate", "--offline", write(tmp_path, BOOT + HARD + "authorizer.class.name="
                                     "io.quotapipeline.callback.BasicStopAuthorizer\n")])  # brokers before Kafka 4.1
    out = capsys.readouterr().out
    assert "# at factor 0 the brokers' StopAuthorizer refuses the writes to the topics the decision names" in out


REFUSING = "authorizer.class.name=io.quotapipeline.callback.StopAuthorizer\n"


def test_validate_explains_the_stop_in_one_line_that_points_to_the_docs(tmp_path, capsys):
    for extra in ("", REFUSING):
        assert main(["validate", "--offline", write(tmp_path, BOOT + HARD + extra)]) == 0
        comments = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
        assert len(comments) == 1 and comments[0].endswith("(more: docs/broker-side.md)"), comments


def test_validate_shows_values_as_they_would_be_written_without_markup(tmp_path, capsys):
    assert main(["validate", "--offline", write(tmp_path, BOOT + HARD)]) == 0
    out = capsys.readouterr().out
    assert "quota.pipeline.stop.authorizer.delegate=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n" in out
    assert not [line for line in out.splitlines() if "`" in line.partition("=")[2] and not line.startswith("#")]


def test_validate_warns_when_a_refusing_stop_exempts_no_principal(tmp_path, capsys):
    excluded = "client.quota.callback.static.excluded.principal.name.list=User:quota-pipeline\n"
    assert main(["validate", "--offline", write(tmp_path, BOOT + HARD + REFUSING)]) == 0
    err = capsys.readouterr().err
    assert "warning: client.quota.callback.static.excluded.principal.name.list is empty" in err
    assert "docs/broker-side.md" in err and len(err.strip().splitlines()) == 1
    for text in (BOOT + HARD + REFUSING + excluded, BOOT + HARD):  # exempted; or the throttle's stop
        assert main(["validate", "--offline", write(tmp_path, text)]) == 0
        assert "excluded.principal.name.list is empty" not in capsys.readouterr().err


def test_the_examples_spell_the_check_interval_as_the_readme_does():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spelled = "client.quota.callback.static.storage.check.interval="
    assert spelled + "PT10S" in (root / "README.md").read_text()
    for example in ("conf/examples/example.properties", "conf/demo.properties"):
        lines = (root / example).read_text().splitlines()
        interval = [line for line in lines if "check" in line and "interval" in line]
        assert len(interval) == 1 and interval[0].startswith(spelled + "PT"), (example, interval)
        assert cfg.load(root / example).check_interval.total_seconds() > 0


def test_validate_acceptance_four_errors_exit_2(tmp_path, capsys):
    path = write(tmp_path, BOOT + HARD +
                 "client.quota.callback.static.storage.per.volume.limit.min.available.ratio=1.5\n"
                 "client.quota.callback.static.throttle.factor.fallback=-1\n"
                 "client.quota.callback.static.excluded.principal.name.list=User:ok;nobody\n")
    with pytest.raises(SystemExit) as exc:
        main(["validate", path])
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 4
    assert any("both" in e and "min.available.bytes" in e and "min.available.ratio" in e for e in errors)
    assert any("ratio" in e and "(got 1.5)" in e for e in errors)
    assert any("fallback" in e and "(got -1)" in e for e in errors)
    assert any("nobody" in e for e in errors)


def test_validate_prints_effective_config_with_secrets_masked(tmp_path, capsys):
    path = write(tmp_path, BOOT + HARD +
                 "client.quota.callback.static.kafka.admin.sasl.jaas.config=org.x.PlainLoginModule required "
                 "username=\"u\" password=\"hunter2\";\n"
                 "client.quota.callback.static.kafka.admin.ssl.truststore.password=hunter3\n")
    assert main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert "hunter2" not in out and "hunter3" not in out
    assert "client.quota.callback.static.kafka.admin.sasl.jaas.config=******" in out
    assert "client.quota.callback.static.throttle.factor.validity.duration=PT5M" in out


def test_errors_never_print_secrets(tmp_path):
    out = problems(tmp_path, HARD + "client.quota.callback.static.kafka.admin.ssl.key.password=s3cr3t\n"
                   "client.quota.callback.static.kafka.admin.bootstrap.servers=\n")
    assert not any("s3cr3t" in line for line in out)


SECRETS = ("AKIAEXAMPLE", "SuperSecret123", "u:p4ss", "TrustPass987", "TokVal555", "XSecretVal777", "RegPass11",
           "ApiKeyVal321", "CkSecret42")


def test_validate_masks_uri_userinfo_and_secret_looking_names(tmp_path, capsys):
    admin, output = "client.quota.callback.static.kafka.admin.", "quota.pipeline.output.kafka."
    path = write(tmp_path, BOOT + HARD +
                 "quota.pipeline.journal.path=s3://AKIAEXAMPLE:SuperSecret123@bucket/j\n"
                 "quota.pipeline.checkpoint.path=s3a://AKIAEXAMPLE:CkSecret42@ckbucket/cp\n"
                 f"{admin}basic.auth.user.info=u:p4ss\n"
                 f"{admin}schema.registry.url=http://reguser:RegPass11@reg:8081\n"
                 f"{output}ssl.truststore.password=TrustPass987\n"
                 f"{output}schema.registry.apikey=ApiKeyVal321\n"
                 "some.unknown.api.token=TokVal555\n"
                 f"{admin}some.unknown.api.token=TokVal555\n"
                 "x.secret.key=XSecretVal777\n"
                 f"{output}x.secret.key=XSecretVal777\n"
                 "quota.pipeline.cluster.name=prod-east\n"
                 f"{output}key.serializer=org.apache.kafka.common.serialization.StringSerializer\n")
    assert main(["validate", "--offline", path]) == 0
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert not [s for s in SECRETS if s in shown], shown
    out = captured.out.splitlines()
    assert "quota.pipeline.journal.path=s3://******@bucket/j" in out  # the bucket and path stay readable
    assert f"{admin}basic.auth.user.info=******" in out and f"{admin}schema.registry.url=http://******@reg:8081" in out
    assert "quota.pipeline.cluster.name=prod-east" in out
    assert f"{output}key.serializer=org.apache.kafka.common.serialization.StringSerializer" in out
    assert "quota.pipeline.signing.keys=" in out  # unset: shown empty, not as a masked secret


def test_errors_and_log_lines_never_echo_uri_userinfo(tmp_path):
    import logging

    from quota_pipeline.core.display import VisibleFormatter

    out = problems(tmp_path, BOOT + HARD + "quota.pipeline.journal.period=s3://AKIAEXAMPLE:SuperSecret123@bucket/j\n")
    assert out and "(got s3://******@bucket/j)" in out[0] and "SuperSecret123" not in out[0]
    # the job's start line as configure_logging formats it; an AWS secret often holds '/', sometimes '@'
    record = logging.makeLogRecord({"msg": "checkpoint on %s: S3A to %s", "levelno": logging.INFO,
                                    "args": ("s3a://AKIAEXAMPLE:Super/Secret@123@ckbucket/cp", "default")})
    assert VisibleFormatter("%(message)s").format(record) == "checkpoint on s3a://******@ckbucket/cp: S3A to default"


def test_which_names_hold_a_secret():
    from quota_pipeline.core.properties import is_secret

    secret = ["basic.auth.user.info", "schema.registry.userinfo", "schema.registry.apikey", "x.secret.key",
              "some.unknown.api.token", "aws_access_key", "quota.pipeline.signing.keys", "ssl.truststore.password",
              "sasl.jaas.config"]
    harmless = ["quota.pipeline.cluster.name", "key.serializer", "key.converter", "ssl.keystore.type",
                "ssl.keystore.location", "quota.pipeline.journal.path"]
    for prefix in ("", cfg.ADMIN_PREFIX):  # under a prefix the same
        assert [n for n in secret if not is_secret(prefix + n)] == []
        assert [n for n in harmless if is_secret(prefix + n)] == []


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(cfg.ConfigError) as exc:
        cfg.load(tmp_path / "nope.properties")
    assert "no such configuration file" in str(exc.value)


def test_the_configuration_page_tables_come_from_the_property_table():
    from pathlib import Path

    from quota_pipeline.core.properties import markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert markdown(True) in page, "docs/configuration.md's Strimzi table is stale: python3 -m quota_pipeline.core.properties"
    assert markdown(False) in page, "docs/configuration.md's extension table is stale: python3 -m quota_pipeline.core.properties"


def test_output_settings_without_a_bootstrap_tune_the_observed_clusters_client(tmp_path):
    """The stall warning advises quota.pipeline.output.kafka.request.timeout.ms: set alone, it must not leave the
    publisher without a cluster (it did: "cannot reach the output cluster None")."""
    ssl = "client.quota.callback.static.kafka.admin.security.protocol=SSL\n"
    tuned = cfg.load(write(tmp_path, BOOT + HARD + ssl + "quota.pipeline.output.kafka.request.timeout.ms=8000\n"))
    assert tuned.output_settings == {"bootstrap.servers": "k1:9092,k2:9092", "security.protocol": "SSL",
                                     "request.timeout.ms": "8000"}
    assert not tuned.separate_output
    other = cfg.load(write(tmp_path, BOOT + HARD + ssl + "quota.pipeline.output.kafka.bootstrap.servers=o:9092\n"))
    assert other.output_settings == {"bootstrap.servers": "o:9092"} and other.separate_output
