"""`quota-pipeline acls`: the least-privilege bindings (pure), their kafka-acls.sh and JSON forms, and bad input."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from quota_pipeline.cli import main
from quota_pipeline.kafka.acls import (
    BOTH, OBSERVED, OUTPUT, AclInputError, Binding, Principals, check_principal, kafka_acls_lines, plan,
    sasl_principal,
)

TOPIC = "__quota_throttle_factors"
P = "client.quota.callback.static."
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def jaas(user: str) -> str:
    return f'{SCRAM} required username="{user}" password="pw-{user}";'


def sasl(bootstrap: str, user: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas(user)}


def write_conf(tmp_path: Path, output: dict[str, str] | None = None, admin: dict[str, str] | None = None) -> str:
    props = {P + "storage.per.volume.limit.min.available.ratio": "0.05",
             **{P + "kafka.admin." + k: v for k, v in (admin or sasl("obs:9093", "pipeline")).items()},
             **{"quota.pipeline.output.kafka." + k: v for k, v in (output or {}).items()}}
    path = tmp_path / "c.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def ops(bindings, principal: str, resource_type: str) -> set[str]:
    return {b.operation for b in bindings if b.principal == principal and b.resource_type == resource_type}


WHO = Principals(pipeline="User:pipe", observer="User:obs", readers=("User:broker", "User:dash"),
                 enforce=("User:enf",))


def test_only_the_pipeline_may_write_and_everyone_else_reads_on_two_clusters():
    observed, output = plan(WHO, TOPIC, {"bootstrap.servers": "obs:9092"}, {"bootstrap.servers": "out:9092"})
    assert (observed.role, observed.bootstrap, output.role, output.bootstrap) == (OBSERVED, "obs:9092", OUTPUT,
                                                                                  "out:9092")
    writers = {b.principal for c in (observed, output) for b in c.bindings if b.operation in ("WRITE", "CREATE")}
    assert writers == {"User:pipe"}
    assert ops(output.bindings, "User:pipe", "TOPIC") == {"CREATE", "WRITE", "DESCRIBE"}
    assert ops(output.bindings, "User:pipe", "CLUSTER") == {"DESCRIBE_CONFIGS"}
    for reader in ("User:broker", "User:dash", "User:enf"):
        assert ops(output.bindings, reader, "TOPIC") == {"READ", "DESCRIBE"}
        assert ops(observed.bindings, reader, "TOPIC") == set()
    # On the observed cluster: DescribeLogDirs for the pipeline's observer login, client quotas for enforce.
    assert {(b.principal, b.resource_type, b.operation) for b in observed.bindings} == {
        ("User:obs", "CLUSTER", "DESCRIBE"), ("User:enf", "CLUSTER", "ALTER_CONFIGS"),
        ("User:enf", "CLUSTER", "DESCRIBE_CONFIGS")}
    assert all(b.resource_name == TOPIC for b in output.bindings if b.resource_type == "TOPIC")
    assert all((b.pattern_type, b.host, b.permission_type) == ("LITERAL", "*", "ALLOW")
               for c in (observed, output) for b in c.bindings)


def test_one_cluster_holds_every_binding_once():
    same = Principals(pipeline="User:pipe", observer="User:pipe", readers=("User:enf",), enforce=("User:enf",))
    [both] = plan(same, TOPIC, {"bootstrap.servers": "k:9092", "security.protocol": "SASL_SSL"}, None)
    assert both.role == BOTH and both.secured
    assert len(both.bindings) == len(set(both.bindings))  # a reader that is also enforce reads once
    assert ops(both.bindings, "User:pipe", "CLUSTER") == {"DESCRIBE", "DESCRIBE_CONFIGS"}
    assert ops(both.bindings, "User:enf", "TOPIC") == {"READ", "DESCRIBE"}


def test_kafka_acls_lines_group_operations_and_need_an_admin_login_where_secured():
    observed, output = plan(WHO, TOPIC, {"bootstrap.servers": "obs:9092", "security.protocol": "SASL_SSL"},
                            {"bootstrap.servers": "out:9092"})
    lines = kafka_acls_lines([observed, output], {OBSERVED: None, OUTPUT: None})
    commands = [shlex.split(line, comments=True) for line in lines if not line.startswith("#")]
    pipe = next(c for c in commands if "User:pipe" in c and "--topic" in c)
    assert pipe[:3] == ["kafka-acls.sh", "--bootstrap-server", "out:9092"] and "--command-config" not in pipe
    assert pipe[pipe.index("--topic") + 1] == TOPIC
    assert [pipe[i + 1] for i, a in enumerate(pipe) if a == "--operation"] == ["Create", "Write", "Describe"]
    obs = next(c for c in commands if "User:obs" in c)
    assert obs[obs.index("--command-config") + 1] == "ADMIN.properties" and obs[-1] == "--cluster"
    assert any(line.startswith("# ADMIN.properties:") for line in lines)
    given = kafka_acls_lines([observed], {OBSERVED: "/etc/kafka/admin.properties"})
    assert "--command-config /etc/kafka/admin.properties" in given[1] and "ADMIN.properties:" not in "".join(given)


def test_a_tls_principal_is_quoted_for_the_shell():
    who = Principals(pipeline="User:CN=pipe,O=Example Corp", observer="User:CN=pipe,O=Example Corp")
    [both] = plan(who, TOPIC, {"bootstrap.servers": "k:9092"}, None)
    words = shlex.split(kafka_acls_lines([both], {})[1], comments=True)
    assert words[words.index("--allow-principal") + 1] == "User:CN=pipe,O=Example Corp"


@pytest.mark.parametrize("settings, expected", [
    (sasl("k:1", "alice"), "User:alice"),
    ({**sasl("k:1", "bob"), "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "User:bob"),
    ({**sasl("k:1", "x"), "sasl.mechanism": "GSSAPI"}, None),  # Kerberos principals follow the broker's rules
    ({"bootstrap.servers": "k:1", "security.protocol": "SSL"}, None),
    ({"bootstrap.servers": "k:1"}, None),
])
def test_the_principal_is_the_sasl_user_name_only_where_kafka_makes_it_so(settings, expected):
    assert sasl_principal(settings) == expected


@pytest.mark.parametrize("text", ["alice", "User:", ":alice", "User:ANONYMOUS", "User:*"])
def test_a_bad_principal_is_refused(text):
    with pytest.raises(AclInputError):
        check_principal(text, "--pipeline-principal")


def test_a_wildcard_reader_is_allowed_where_asked():
    assert check_principal("User:*", "--reader-principal", wildcard_ok=True) == "User:*"


def test_the_same_binding_for_two_reasons_is_one():
    assert Binding("User:a", "TOPIC", "t", "READ", "one") == Binding("User:a", "TOPIC", "t", "READ", "two")


# ---- the command ----------------------------------------------------------------------------------

def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["acls", *args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_help_names_every_binding_and_option(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for word in ("--apply", "--json", "--pipeline-principal", "--reader-principal", "--enforce-principal",
                 "--command-config", "DescribeLogDirs", "WRITE", "READ", "ALTER_CONFIGS", "docs/security.md"):
        assert word in out, word


def test_json_uses_the_sasl_users_of_each_cluster(tmp_path, capsys):
    conf = write_conf(tmp_path, output=sasl("out:9093", "writer"))
    code, out, err = run_cli(capsys, "--config", conf, "--json", "--reader-principal", "User:broker")
    assert code == 0, err
    clusters = {c["cluster"]: c for c in json.loads(out)["clusters"]}
    assert clusters[OBSERVED]["bootstrap_servers"] == "obs:9093"
    assert {b["principal"] for b in clusters[OBSERVED]["bindings"]} == {"User:pipeline"}
    writes = [b for b in clusters[OUTPUT]["bindings"] if b["operation"] == "WRITE"]
    assert [(b["principal"], b["resource_type"], b["resource_name"]) for b in writes] == [
        ("User:writer", "TOPIC", TOPIC)]
    assert "pw-" not in out + err


def test_lines_point_kafka_acls_at_the_admin_file_and_its_bootstrap(tmp_path, capsys):
    admin = tmp_path / "admin.properties"
    admin.write_text("bootstrap.servers=obs:9095\nsecurity.protocol=SASL_SSL\n")
    code, out, err = run_cli(capsys, "--config", write_conf(tmp_path), "--reader-principal", "User:broker",
                             "--command-config", str(admin))
    assert code == 0, err
    commands = [line for line in out.splitlines() if line.startswith("kafka-acls.sh")]
    assert len(commands) == 3 and all(f"--bootstrap-server obs:9095 --command-config {admin}" in c for c in commands)


@pytest.mark.parametrize("args, says", [
    (["--pipeline-principal", "pipeline"], "--pipeline-principal: 'pipeline' is not a principal"),
    (["--reader-principal", "User:ANONYMOUS"], "PLAINTEXT"),
    (["--enforce-principal", "User:*"], "every principal"),
    (["--command-config", "/nonexistent/admin.properties"], "--command-config: no such file"),
    (["--output-command-config", "x.properties"], "the decision topic is on the observed cluster"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    code, out, err = run_cli(capsys, "--config", write_conf(tmp_path), *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and says in err, err


def test_without_a_sasl_login_the_principal_must_be_given(tmp_path, capsys):
    conf = write_conf(tmp_path, admin={"bootstrap.servers": "obs:9093", "security.protocol": "SSL"})
    code, _, err = run_cli(capsys, "--config", conf)
    assert code == 2 and "--pipeline-principal" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = run_cli(capsys, "--config", conf, "--pipeline-principal", "User:CN=pipe",
                             "--reader-principal", "User:CN=broker")
    assert code == 0 and "--allow-principal User:CN=pipe" in out, err


def test_no_reader_is_a_note_not_an_error(tmp_path, capsys):
    code, out, err = run_cli(capsys, "--config", write_conf(tmp_path))
    assert code == 0 and "--reader-principal" in err and "kafka-acls.sh" in out


def test_a_missing_config_is_exit_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, "--config", str(tmp_path / "missing.properties"))
    assert code == 2 and "Traceback" not in err


def test_a_wildcard_reader_is_warned_that_records_name_topics_and_log_dirs(tmp_path, capsys):
    code, out, err = run_cli(capsys, "--config", write_conf(tmp_path), "--reader-principal", "User:*")
    assert code == 0 and "User:*" in out, err
    assert "warning: --reader-principal User:* lets every principal read" in err
    assert "set quota.pipeline.record.closest.volumes=0 to leave the partitions" in err
    code, _, err = run_cli(capsys, "--config", write_conf(tmp_path), "--reader-principal", "User:broker")
    assert code == 0 and "warning" not in err
