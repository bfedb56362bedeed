"""`quota-pipeline enforce --stop refuse` on Apache Kafka from KAFKA_HOME: a stop refuses writes with DENY WRITE
bindings (StandardAuthorizer, allow.everyone.if.no.acl.found=true), the release deletes exactly the enforcer's own.

One story, the enforcer in a process of its own (so that it can be killed -9):
- the operator's ACLs on topic A (everyone may use it, but User:mallory may not write) are in place; B has none;
- a 0.0 decision stopping topic A: a producer to A gets TOPIC_AUTHORIZATION_FAILED and nothing is appended; B goes on;
- the enforcer is killed -9 mid-stop; the next decision stops the whole cluster; a restarted enforcer refuses B as
  well (a consumer of B still reads it: the companion ALLOW), never the decision topic;
- the release is published by a producer with the pipeline publisher's client id (no special treatment: the
  decision topic is simply never refused); a producer retrying on A is acknowledged within 2 s of the enforcer's
  release line; the operator's ACLs on A are as before, and nothing of the enforcer's is left.
The tests read what the story measured.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.core.properties import PUBLISHER_CLIENT_ID
from quota_pipeline.enforce.refuse import MARKER_PRINCIPAL, RefusalState, companion_binding, deny_binding, marker_binding
from quota_pipeline.enforce.refuser import RefusalFile
from quota_pipeline.kafka.acl_admin import AclAdmin
from quota_pipeline.kafka.acls import Binding
from quota_pipeline.kafka.publisher import ensure_topic
from quota_pipeline.kafka.refusal import ADMIN_SETTINGS
from harness.kafka_client import decision
from harness.kafka import ClusterSpec, RealKafka
from tests.support.realkafka_fixtures import _start
from harness.kafka_process import FAST_START_JVM
from harness.kafka_props import client_properties, pipeline_properties, wait_for, write_properties

CLUSTER = "refuse-real"
ROOT = Path(__file__).resolve().parents[2]
RETRY_ACKED_WITHIN_S = 2.0
# The operator's own ACLs on A: everyone may use it (so ACLs, not allow.everyone, govern it), mallory may not write.
OPERATOR = {Binding("User:*", "TOPIC", "A", "ALL"), Binding("User:mallory", "TOPIC", "A", "WRITE", permission_type="DENY")}


@pytest.fixture(scope="module")
def authorized_kafka() -> Iterator[RealKafka]:
    """One node with KRaft's StandardAuthorizer: a topic without ACLs is open to all, the SCRAM user is a super user."""
    cluster = _start(ClusterSpec(nodes=1, log_dirs=1, jvm_opts=FAST_START_JVM, authorizer=True,
                                 overrides={"allow.everyone.if.no.acl.found": "true",
                                            "super.users": "User:quota-test"}))
    yield cluster
    cluster.stop()


class EnforceProcess:
    """`quota-pipeline enforce` in its own process; every stdout line kept with the monotonic time it was read."""

    def __init__(self, conf: Path, log: Path) -> None:
        self.lines: list[tuple[float, str]] = []
        self._err = log.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-u", "-m", "quota_pipeline.cli", "enforce", str(conf),
                                      "--interval", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=self._err,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append((time.monotonic(), raw.decode(errors="replace").rstrip()))

    def line(self, *parts: str, after: float = 0.0, timeout: float = 20.0) -> float:
        """When the first line (read after `after`) containing every part was read."""
        def found() -> float | None:
            return next((t for t, text in list(self.lines) if t >= after and all(p in text for p in parts)), None)
        return wait_for(found, timeout, f"enforce prints a line with {parts}; it printed {self.text()!r}", every=0.05)

    def text(self) -> str:
        return "\n".join(text for _, text in self.lines)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._err.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._err.close()


def publish(cluster: RealKafka, topic: str, factor: float, stop: dict[str, Any] | None, key: str = CLUSTER) -> None:
    """A decision as the pipeline publishes it: its client id, acks=all; `stop` as the record carries it."""
    from confluent_kafka import Producer
    record = {**decision(key, factor, dt.datetime.now(dt.timezone.utc)).to_json(), "stop": stop}
    producer = Producer({**cluster.client_config(), "client.id": PUBLISHER_CLIENT_ID, "acks": "all", "linger.ms": 0})
    producer.produce(topic, key=key.encode(), value=json.dumps(record))
    assert producer.flush(20) == 0, "the decision was not acknowledged"


def produce_once(cluster: RealKafka, topic: str, producer: Any = None) -> Any:
    """One record to `topic`: None when acknowledged, else the delivery error."""
    from confluent_kafka import KafkaException, Producer
    producer = producer or Producer({**cluster.client_config(), "linger.ms": 0, "message.timeout.ms": 5000})
    outcome: list[Any] = []
    try:
        producer.produce(topic, b"x" * 100, on_delivery=lambda err, msg: outcome.append(err))
    except KafkaException as refused:  # librdkafka refuses at once a topic its metadata already marks unauthorized
        return refused.args[0]
    producer.flush(10)
    return outcome[0] if outcome else "no delivery report within 10 s"


def end_offset(cluster: RealKafka, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**cluster.client_config(), "group.id": "refuse-offsets"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def reads(cluster: RealKafka, topic: str) -> bool:
    """Whether a consumer can read the first record of `topic`."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({**cluster.client_config(), "group.id": f"refuse-reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                return msg.error() is None
        return False
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def story(authorized_kafka: RealKafka, tmp_path_factory) -> Iterator[dict[str, Any]]:
    cluster = authorized_kafka
    work = tmp_path_factory.mktemp("refuse")
    decisions = f"decisions-{uuid.uuid4().hex[:8]}"
    props = pipeline_properties(cluster, **{cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: decisions,
                                            cfg.CHECKPOINT_PATH: str(work / "checkpoint"), cfg.VALIDITY: "PT5M",
                                            "allow.everyone.if.no.acl.found": "true"})
    conf = write_properties(work / "cluster.properties", props)
    state_file = work / "checkpoint" / "enforce" / f"{CLUSTER}.refusals.json"
    from confluent_kafka.admin import AdminClient, NewTopic
    admin_client = AdminClient(cluster.client_config())
    for topic in ("A", "B"):
        admin_client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    ensure_topic(client_properties(cluster), decisions)
    acls = AclAdmin(client_properties(cluster), ADMIN_SETTINGS)
    acls.create(sorted(OPERATOR, key=lambda b: b.permission_type))  # ALLOW first: A stays usable throughout
    events: dict[str, Any] = {"state_file": state_file, "decisions": decisions}
    wait_for(lambda: produce_once(cluster, "A") is None and produce_once(cluster, "B") is None, 20,
             "A and B take records before the stop")
    enforcer = EnforceProcess(conf, work / "enforce.log")
    try:
        enforcer.line("enforcing decisions")
        # 1. A stop of topic A. (The binding reaches the broker's authorizer through the metadata log: a record
        # produced in the moment after CreateAcls returned may still be taken, so the count starts at a refusal.)
        publish(cluster, decisions, 0.0, {"scope": "topics", "topics": ["A"]})
        denied = enforcer.line("topic A", "deny WRITE")
        events["a_refused"] = wait_for(lambda: (lambda e: e if e is not None else None)(produce_once(cluster, "A")),
                                       10, "a producer to A is refused")
        events["a_refused_after"] = time.monotonic() - denied
        events["a_before"] = end_offset(cluster, "A")
        events["a_refusals"] = [produce_once(cluster, "A") for _ in range(5)]
        events["a_after"] = end_offset(cluster, "A")
        events["b_during_a_stop"] = produce_once(cluster, "B")
        events["state_mid_stop"] = json.loads(state_file.read_text())
        # 2. kill -9 mid-stop; the next decision stops the whole cluster; a restart continues from the state file.
        enforcer.kill9()
        publish(cluster, decisions, 0.0, {"scope": "cluster"})
        enforcer = EnforceProcess(conf, work / "enforce.log")
        enforcer.line("topic B", "deny WRITE")
        events["b_refused"] = wait_for(lambda: (lambda e: e if e is not None else None)(produce_once(cluster, "B")),
                                       10, "a producer to B is refused")
        events["b_reads"] = reads(cluster, "B")
        events["acls_cluster_stop"] = set(acls.topic_acls())
        # 3. The release, published by a producer with the publisher's client id during the cluster-wide stop.
        from confluent_kafka import Producer
        retrying = Producer({**cluster.client_config(), "linger.ms": 0, "message.timeout.ms": 5000})
        acked: dict[str, float] = {}

        def retry() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if produce_once(cluster, "A", retrying) is None:
                    acked["at"] = time.monotonic()
                    return
                time.sleep(0.1)
        worker = threading.Thread(target=retry, daemon=True)
        published = time.monotonic()
        publish(cluster, decisions, 1.0, None)
        worker.start()
        released = enforcer.line("topic A", "release", after=published)
        worker.join(35)
        events["retry_acked_after"] = acked["at"] - released if "at" in acked else None
        enforcer.line("topic B", "release", after=published)
        events["acls_after"] = wait_for(lambda: (lambda a: a if a == OPERATOR else None)(set(acls.topic_acls())), 10,
                                        "only the operator's ACLs are left")
        events["b_after"] = produce_once(cluster, "B")
        events["output"] = enforcer.text()
        print(f"enforce --stop refuse on real Kafka: A refused {events['a_refused_after']:.2f} s after the enforcer's "
              f"line; the retry on A acknowledged {events['retry_acked_after']} s after its release line\n"
              f"{events['output']}")
        yield events
    finally:
        enforcer.stop()
        acls.delete(sorted(set(acls.topic_acls())))
        for topic in ("A", "B", decisions):
            admin_client.delete_topics([topic])[topic].result(30)


def test_a_producer_to_a_stopped_topic_is_refused_and_nothing_is_appended(story):
    assert story["a_refused"].name() == "TOPIC_AUTHORIZATION_FAILED", story["a_refused"]
    assert [e.name() if e is not None else None for e in story["a_refusals"]] == ["TOPIC_AUTHORIZATION_FAILED"] * 5
    assert story["a_after"] == story["a_before"]
    assert story["a_refused_after"] < 2.0, story["a_refused_after"]  # from the enforcer's line to the broker


def test_a_topic_outside_the_stop_keeps_producing(story):
    assert story["b_during_a_stop"] is None, story["b_during_a_stop"]


def test_the_state_file_holds_the_enforcers_binding_only(story):
    held = {(b["principal"], b["resource_name"], b["operation"], b["permission_type"])
            for b in story["state_mid_stop"]["bindings"]}
    # A has ACLs of its own: no companion; A's marker says the DENY is the enforcer's.
    assert held == {("User:*", "A", "WRITE", "DENY"), (MARKER_PRINCIPAL, f"quota-pipeline.enforce/{CLUSTER}/A", "READ",
                                                       "DENY")}


def test_after_a_kill_9_and_a_restart_a_cluster_wide_stop_refuses_b_but_never_the_decision_topic(story):
    assert story["b_refused"].name() == "TOPIC_AUTHORIZATION_FAILED", story["b_refused"]
    assert story["b_reads"], "a consumer of a refused topic without ACLs of its own still reads it (companion ALLOW)"
    acls = story["acls_cluster_stop"]
    assert {deny_binding("A"), deny_binding("B"), companion_binding("B")} <= acls
    assert not [b for b in acls if b.resource_name == story["decisions"] or b.resource_name.startswith("__")]


def test_the_release_deletes_exactly_the_enforcers_bindings(story):
    assert story["acls_after"] == OPERATOR  # the operator's DENY on A survives the release
    assert not story["state_file"].exists()
    assert story["b_after"] is None


def test_a_retry_is_acknowledged_within_2_s_of_the_release(story):
    after = story["retry_acked_after"]
    assert after is not None and after <= RETRY_ACKED_WITHIN_S, (after, story["output"])


def test_enforce_refuse_on_a_cluster_without_an_authorizer_exits_2_with_one_line(real_kafka, tmp_path, capsys):
    conf = write_properties(tmp_path / "c.properties", pipeline_properties(
        real_kafka, **{cfg.CLUSTER_NAME: "no-authorizer", cfg.CHECKPOINT_PATH: str(tmp_path / "ckpt")}))
    capsys.readouterr()
    assert main(["enforce", str(conf), "--once", "--dry-run"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(err) == 1 and "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer" in err[0]
    assert "--stop throttle" in err[0]


def test_an_operators_own_deny_survives_a_stop_and_a_planted_state_file(authorized_kafka, tmp_path, capsys):
    """The operator's `DENY WRITE User:*` on T exists before a stop of T and U; a state file claiming it is planted
    (no signing keys: the claim is judged by the markers in Kafka; with keys: refused outright). The enforcer refuses
    U with bindings of its own, leaves T's alone, and the release deletes U's only."""
    cluster, key = authorized_kafka, "refuse-own"
    run_id = uuid.uuid4().hex[:8]
    own, other, decisions = f"T-{run_id}", f"U-{run_id}", f"decisions-own-{run_id}"
    ckpt = tmp_path / "checkpoint"
    props = pipeline_properties(cluster, **{cfg.CLUSTER_NAME: key, cfg.OUTPUT_TOPIC: decisions,
                                            cfg.CHECKPOINT_PATH: str(ckpt), "allow.everyone.if.no.acl.found": "true"})
    conf = write_properties(tmp_path / "c.properties", props)
    signed = write_properties(tmp_path / "signed.properties", {**props, cfg.SIGNING_KEYS: "k1:" + "a" * 40})
    acls = AclAdmin(client_properties(cluster), ADMIN_SETTINGS)
    operators = deny_binding(own)
    ensure_topic(client_properties(cluster), decisions)
    acls.create([operators])
    refusals = RefusalFile(ckpt / "enforce" / f"{key}.refusals.json", ckpt / "enforce")
    refusals.save(RefusalState(key, frozenset({operators, marker_binding(key, own)})))  # planted, unsigned

    def enforce(config: Path) -> tuple[int, str, str]:
        code = main(["enforce", str(config), "--once", "--catch-up-timeout", "10"])
        out, err = capsys.readouterr()
        return code, out, err

    def topic_acls() -> set[Binding]:
        return {b for b in acls.topic_acls() if b.resource_name in (own, other)}
    try:
        wait_for(lambda: operators in acls.topic_acls() or None, 10, "the operator's DENY is shown")
        # With signing keys, the unsigned file is refused in one line before anything is asked of the cluster.
        code, out, err = enforce(signed)
        errors = [line for line in err.splitlines() if line.startswith("error")]
        assert code == 1 and len(errors) == 1 and "is not signed" in errors[0] and "nothing was done" in errors[0], err
        assert topic_acls() == {operators}
        # Without keys the file is read, and its claim on the operator's DENY is judged by Kafka: no marker, not ours.
        publish(cluster, decisions, 0.0, {"scope": "topics", "topics": [own, other]}, key)
        code, out, err = enforce(conf)
        assert code == 0, err
        assert f"topic {own}: the refusal state file lists DENY User:* WRITE" in out and "not the enforcer's" in out
        assert f"topic {other}: deny WRITE" in out
        assert marker_binding(key, other) in acls.refusal_acls(MARKER_PRINCIPAL)
        assert marker_binding(key, own) not in acls.refusal_acls(MARKER_PRINCIPAL)
        publish(cluster, decisions, 1.0, None, key)
        code, out, err = enforce(conf)
        assert code == 0 and f"topic {other}: release, the DENY WRITE deleted" in out and own not in out, (out, err)
        assert wait_for(lambda: topic_acls() == {operators} or None, 10, "only the operator's DENY is left")
        assert not acls.refusal_acls(MARKER_PRINCIPAL) or all(
            not b.resource_name.startswith(f"quota-pipeline.enforce/{key}/") for b in acls.refusal_acls(MARKER_PRINCIPAL))
        assert not refusals.path.exists()
    finally:
        acls.delete(sorted(topic_acls() | {b for b in acls.refusal_acls(MARKER_PRINCIPAL)
                                           if b.resource_name.startswith(f"quota-pipeline.enforce/{key}/")}))
        from confluent_kafka.admin import AdminClient
        admin_client = AdminClient(cluster.client_config())
        admin_client.delete_topics([decisions])[decisions].result(30)


def test_with_a_separate_output_cluster_a_topic_named_like_the_decision_topic_is_refused_during_a_stop(
        authorized_kafka, real_kafka, tmp_path, capsys):
    """The decisions live on another cluster (the session's `real_kafka`): on the observed cluster a topic named like
    the decision topic is anyone's, so a cluster-wide stop denies its writes like any other topic's."""
    observed, run_id = authorized_kafka, uuid.uuid4().hex[:8]
    key, other, decisions = "refuse-separate", f"S-{run_id}", f"decisions-separate-{run_id}"
    props = pipeline_properties(observed, **{
        cfg.CLUSTER_NAME: key, cfg.OUTPUT_TOPIC: decisions, cfg.CHECKPOINT_PATH: str(tmp_path / "ckpt"),
        "quota.pipeline.stop.scope": "cluster", "allow.everyone.if.no.acl.found": "true",
        "quota.pipeline.output.kafka.bootstrap.servers": real_kafka.bootstrap()})
    conf = write_properties(tmp_path / "c.properties", props)
    from confluent_kafka.admin import AdminClient, NewTopic
    admin_client = AdminClient(observed.client_config())
    for topic in (decisions, other):  # a topic named like the decision topic, and another
        admin_client.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    ensure_topic({"bootstrap.servers": real_kafka.bootstrap()}, decisions)
    acls = AclAdmin(client_properties(observed), ADMIN_SETTINGS)
    try:
        wait_for(lambda: produce_once(observed, decisions) is None or None, 20,
                 "the topic named like the decision topic takes records")
        publish(real_kafka, decisions, 0.0, {"scope": "topics", "topics": [other]}, key)
        assert main(["enforce", str(conf), "--once", "--catch-up-timeout", "10"]) == 0
        denied = wait_for(lambda: (lambda d: d if {decisions, other} <= d else None)(
            {b.resource_name for b in acls.topic_acls() if b.permission_type == "DENY" and b.operation == "WRITE"
             and b.principal == "User:*"}), 10, "the stop's DENY bindings are shown")
        assert not any(t.startswith("__") for t in denied), denied
        refusal = wait_for(lambda: produce_once(observed, decisions), 10,
                           "a producer to the topic named like the decision topic is refused")
        assert refusal.name() == "TOPIC_AUTHORIZATION_FAILED", refusal
    finally:  # the release deletes every binding of the stop (on every topic of the cluster)
        publish(real_kafka, decisions, 1.0, None, key)
        assert main(["enforce", str(conf), "--once", "--catch-up-timeout", "10"]) == 0
        capsys.readouterr()
    assert wait_for(lambda: produce_once(observed, decisions) is None or None, 10, "the release lets it write")
    for topic in (decisions, other):
        admin_client.delete_topics([topic])[topic].result(30)
