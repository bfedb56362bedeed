"""docs/broker-side.md's Deploy blocks, one per authorizer the cluster had (none, StandardAuthorizer, another class),
each on a real 3-node KRaft cluster of combined nodes (process.roles=broker,controller) loading the jar: the quorum
forms and an acks=all write is acknowledged. The blocks are read from the page, so the page and the test cannot
drift; only the output bootstrap (the example's host names) becomes the node's own listener.

And the mistake the blocks exist for: the StandardAuthorizer block copied onto a cluster that had no authorizer (no
super.users) keeps the quorum from forming, and the node says so at start in one WARN line (checked on one node of
three voters, its peers never started: no wait for a quorum that never forms).
"""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import javaproperties
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness import kafka_config as rc
from harness.kafka import SELF_PLAINTEXT, ClusterSpec, RealKafka, free_ports, kafka_home, start_cluster
from harness.kafka_process import FAST_START_JVM, NodeProcess, format_storage
from harness.kafka_tls import make_broker_tls

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "broker-side.md"
AUDIT_SOURCE = ROOT / "tests" / "java" / "authorizer" / "com" / "example" / "AuditAuthorizer.java"
STOP = "io.quotapipeline.callback.StopAuthorizer"
DELEGATE = "quota.pipeline.stop.authorizer.delegate"
OUTPUT_BOOTSTRAP = "quota.pipeline.output.kafka.bootstrap.servers"
AUDIT = "com.example.AuditAuthorizer"
# The page's label of each block, the delegate it must set, what the cluster had before, how the start line names it.
CASES = {
    "none": ("No authorizer before", "none", {}, "nobody (quota.pipeline.stop.authorizer.delegate=none"),
    "standard": ("StandardAuthorizer before", rc.STANDARD_AUTHORIZER, rc.authorizer_properties(),
                 f"{rc.STANDARD_AUTHORIZER} (its ACLs from the cluster metadata)"),
    "other": ("Another authorizer before", AUDIT, {"authorizer.class.name": AUDIT}, f"{AUDIT} (a plain Authorizer"),
}
QUORUM_WARNING = "stop authorizer: the KRaft quorum will not form"
READY_S = 90.0  # each node listed as an active broker (so the quorum formed), stretched by the machine's load
WARNING_S = 45.0  # the line comes when the controller configures its authorizer, seconds after the JVM starts


def deploy_block(label: str) -> dict[str, str]:
    """The properties of the page's block after `*<label>*`, as a broker reads them."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"^\*{re.escape(label)}\*[^\n]*\n\n```properties\n(.*?)```", text, re.M | re.S)
    assert found, f"{DOC.relative_to(ROOT)} has no properties block after *{label}*"
    return dict(javaproperties.loads(found.group(1)))


def on_this_cluster(block: dict[str, str]) -> dict[str, str]:
    """The block with its example brokers (kafka-0:9092, ...) replaced by the node's own listener: the block says
    they are this cluster's own brokers."""
    assert OUTPUT_BOOTSTRAP in block and block.get("quota.pipeline.output.topic.on.this.cluster") == "true", block
    return {**block, OUTPUT_BOOTSTRAP: SELF_PLAINTEXT}


@pytest.fixture(scope="module")
def audit_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """com.example.AuditAuthorizer compiled against KAFKA_HOME's jars: the "another authorizer" a cluster had."""
    out = tmp_path_factory.mktemp("audit-authorizer")
    subprocess.run(["javac", "-d", str(out), "-cp", f"{kafka_home()}/libs/*", str(AUDIT_SOURCE)], check=True,
                   capture_output=True, timeout=120)
    return out


@pytest.fixture
def plugin_classpath(callback_jar: Path, audit_classes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLASSPATH", f"{callback_jar}:{audit_classes}")  # kafka-run-class.sh puts it first


def acknowledged_write(cluster: RealKafka) -> list[object]:
    """One record produced with acks=all to a new topic replicated on all three nodes: its delivery errors."""
    conf = {"bootstrap.servers": cluster.bootstrap()}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("cases", 1, 3)])["cases"].result(30)
    reports: list[object] = []
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 30000})
    producer.produce("cases", b"written", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(35) == 0, "the record was neither acknowledged nor failed within 35 s"
    return reports


@pytest.mark.parametrize("case", list(CASES))
def test_each_deploy_block_forms_the_quorum_and_acknowledges_a_write(case: str, plugin_classpath: None) -> None:
    label, delegate, before, described = CASES[case]
    block = deploy_block(label)
    assert block["authorizer.class.name"] == STOP and block[DELEGATE] == delegate, block
    cluster = start_cluster(ClusterSpec(nodes=3, log_dirs=1, jvm_opts=FAST_START_JVM, ready_timeout=READY_S,
                                        overrides={**before, **on_this_cluster(block)}))
    try:
        assert len(AdminClient({"bootstrap.servers": cluster.bootstrap()}).list_topics(timeout=10).brokers) == 3
        assert acknowledged_write(cluster) == [None]
        for node_id, node in cluster.nodes.items():
            log = node.whole_log()
            assert f"every other action asked of {described}" in log, f"node {node_id}: {node.log_tail()}"
            assert QUORUM_WARNING not in log, f"node {node_id} warned of a quorum that formed"
    finally:
        cluster.stop()


def first_of_three(root: Path, overrides: dict[str, str]) -> NodeProcess:
    """Node 1 of a quorum of three voters, formatted and started alone (its peers never start)."""
    ports = iter(free_ports(3 * len(rc.LISTENERS)))
    layouts = [rc.NodeLayout(node_id=i, ports={name: next(ports) for name in rc.LISTENERS},
                             log_dirs=[str(root / f"node{i}" / "data")],
                             metadata_dir=str(root / f"node{i}" / "metadata")) for i in (1, 2, 3)]
    first = layouts[0]
    for directory in (*first.log_dirs, first.metadata_dir):
        Path(directory).mkdir(parents=True)
    own = f"127.0.0.1:{first.ports[rc.PLAINTEXT]}"
    text = rc.server_properties(first, rc.quorum_voters(layouts), 3, make_broker_tls(root).broker_properties(),
                                {k: v.replace(SELF_PLAINTEXT, own) for k, v in overrides.items()})
    node = NodeProcess(kafka_home(), first, root / "node1", text, "256m", FAST_START_JVM)
    format_storage(node, rc.random_cluster_id())
    node.start()
    return node


def test_the_standard_block_on_a_cluster_without_authorizer_is_named_at_start(
        callback_jar: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    label, _, _, _ = CASES["standard"]
    monkeypatch.setenv("CLASSPATH", str(callback_jar))
    node = first_of_three(tmp_path, on_this_cluster(deploy_block(label)))  # no super.users: it had no authorizer
    try:
        server_log = node.logs / "server.log"
        deadline = time.monotonic() + WARNING_S
        lines: list[str] = []
        while not lines and time.monotonic() < deadline:
            assert node.running(), f"node 1 exited before it configured its authorizer:\n{node.log_tail()}"
            time.sleep(0.2)
            text = server_log.read_text(errors="replace") if server_log.exists() else ""
            lines = [line for line in text.splitlines() if QUORUM_WARNING in line]
        assert lines, f"no line {QUORUM_WARNING!r} within {WARNING_S:.0f} s:\n{node.log_tail()}"
    finally:
        node.stop(clean=False)
    assert len(lines) == 1, lines
    [line] = lines
    assert " WARN " in line, line
    assert "listener CONTROLLER (PLAINTEXT) as User:ANONYMOUS; super.users empty; " in line, line
    assert "set quota.pipeline.stop.authorizer.delegate=none if this cluster had no authorizer, else add " \
           "User:ANONYMOUS to super.users" in line, line
