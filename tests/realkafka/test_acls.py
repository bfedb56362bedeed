"""Only the pipeline can change the factor, on Apache Kafka from KAFKA_HOME with StandardAuthorizer and SCRAM users.

`quota-pipeline acls --apply` creates the bindings; the pipeline's principal observes, creates the topic and
publishes with the project's publisher; a principal without WRITE is refused; the brokers' principal follows the
topic with the project's reader; and a record dated 9999-12-31 written by a principal that was granted WRITE by
mistake is refused by the reader, which keeps following the genuine records.
"""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from quota_pipeline.reader.reader import Reader
from quota_pipeline.core import config as cfg
from quota_pipeline.kafka.observer import poll_once
from quota_pipeline.kafka.publisher import Publisher, ensure_topic
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE, Entity
from quota_pipeline.kafka.settings import to_librdkafka
from harness import kafka_config as rc
from harness.kafka_client import decision, encode
from harness.kafka import ClusterSpec, KafkaUnavailable, RealKafka, kafka_home, start_cluster
from harness.kafka_process import FAST_START_JVM
from harness.kafka_props import SCRAM_MODULE, prefixed, wait_for, write_properties

CLUSTER = "acl"
USERS = ("pipeline", "broker", "enforcer", "intruder", "rogue")
FAR_FUTURE = dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc)


def login(cluster: RealKafka, user: str) -> dict[str, str]:
    """Java client settings of `user` on the SCRAM listener, as an operator writes them."""
    return {"bootstrap.servers": cluster.bootstrap(rc.SASL), "security.protocol": rc.SASL,
            "sasl.mechanism": rc.SCRAM_MECHANISM,
            "sasl.jaas.config": f'{SCRAM_MODULE} required username="{user}" password="{user}-secret";'}


def cli(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def producer(cluster: RealKafka, user: str) -> Any:
    from confluent_kafka import Producer
    return Producer({**to_librdkafka(login(cluster, user))[0], "acks": "all", "message.timeout.ms": 10000,
                     "log_level": 0})


def produce(client: Any, topic: str, key: str, value: bytes) -> str | None:
    """Write one record and wait: None when acknowledged, else the error's name."""
    outcome: list[Any] = []
    client.produce(topic, key=key.encode(), value=value, on_delivery=lambda err, _msg: outcome.append(err))
    client.flush(15)
    assert outcome, "no delivery report within 15 s"
    return None if outcome[0] is None else outcome[0].name()


@dataclass
class Secured:
    cluster: RealKafka
    conf_path: str
    admin_path: str
    topic: str
    applied: tuple[int, str, str]  # the first `acls --apply --json` run
    before_apply: Any  # the pipeline's observation before any ACL existed


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[Secured]:
    try:
        home = kafka_home()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    cluster = start_cluster(ClusterSpec(nodes=1, log_dirs=1, jvm_opts=FAST_START_JVM, authorizer=True), home)
    try:
        for user in USERS:
            cluster.create_scram_user(user, f"{user}-secret")
        tmp = tmp_path_factory.mktemp("acls")
        topic = f"decisions-{uuid.uuid4().hex[:8]}"
        props = {cfg.HARD_BYTES: "1", cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: topic,
                 **prefixed(cfg.ADMIN_PREFIX, login(cluster, "pipeline"))}
        conf_path = str(write_properties(tmp / "pipeline.properties", props))
        # The bootstrap admin: PLAINTEXT, whose principal (ANONYMOUS) is the cluster's only super user.
        admin_path = str(write_properties(tmp / "admin.properties", {"bootstrap.servers": cluster.bootstrap()}))
        before = poll_once(cfg.load(conf_path))
        applied = cli("acls", "--config", conf_path, "--reader-principal", "User:broker", "--enforce-principal",
                      "User:enforcer", "--command-config", admin_path, "--apply", "--json")
        yield Secured(cluster, conf_path, admin_path, topic, applied, before)
    finally:
        cluster.stop()


def reader(s: Secured, user: str) -> Reader:
    """The project's reader logging in as `user` (started by `with`)."""
    return Reader(cfg.load(s.conf_path), login(s.cluster, user), cluster=CLUSTER)


def publish(s: Secured, factor: float, observed_at: dt.datetime) -> None:
    """The pipeline publishes one decision with the project's publisher (idempotent, acks=all)."""
    publisher = Publisher({**login(s.cluster, "pipeline"), "delivery.timeout.ms": "15000"}, s.topic)
    try:
        publisher.publish([(CLUSTER, json.dumps(decision(CLUSTER, factor, observed_at).to_json()))])
    finally:
        publisher.close()


def test_acls_apply_creates_every_binding_once(secured: Secured):
    code, out, err = secured.applied
    assert code == 0, err
    [cluster] = json.loads(out)["clusters"]
    assert cluster["cluster"] == "observed+output" and not cluster["already_present"]
    added = {(b["principal"], b["resource_type"], b["operation"]) for b in cluster["added"]}
    assert {op for who, kind, op in added if who == "User:pipeline"} == {
        "DESCRIBE", "DESCRIBE_CONFIGS", "CREATE", "WRITE"}  # DESCRIBE twice: on the cluster and on the topic
    assert {who for who, _, op in added if op in ("WRITE", "CREATE")} == {"User:pipeline"}
    code, out, err = cli("acls", "--config", secured.conf_path, "--reader-principal", "User:broker",
                         "--enforce-principal", "User:enforcer", "--command-config", secured.admin_path, "--apply")
    assert code == 0 and f"0 added, {len(cluster['added'])} already present" in out, out + err
    assert "secret" not in out + err
    # A login that may not manage ACLs (the brokers' reader): one line naming --command-config, exit 1.
    not_admin = write_properties(Path(secured.admin_path).with_name("reader.properties"),
                                 login(secured.cluster, "broker"))
    code, out, err = cli("acls", "--config", secured.conf_path, "--reader-principal", "User:broker", "--apply",
                         "--command-config", str(not_admin))
    assert code == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "may not manage ACLs" in last and "--command-config" in last, err


def test_without_its_binding_the_pipeline_cannot_observe_and_with_it_it_can(secured: Secured):
    assert secured.before_apply.status.value == "DESCRIBE_LOG_DIRS_ERROR"
    assert "CLUSTER_AUTHORIZATION_FAILED" in secured.before_apply.message
    after = poll_once(cfg.load(secured.conf_path))
    assert after.status.value == "SUCCESS" and after.brokers == (1,) and len(after.volumes) == 1, after.message


def test_the_pipeline_publishes_the_broker_follows_and_a_principal_without_write_is_refused(secured: Secured):
    from confluent_kafka.admin import AdminClient, ConfigResource
    pipeline = login(secured.cluster, "pipeline")
    assert ensure_topic(pipeline, secured.topic) == "created"
    now = dt.datetime.now(dt.timezone.utc)
    publish(secured, 0.5, now)
    # The pipeline reads the brokers' replica.lag.time.max.ms (DescribeConfigs on the cluster).
    admin = AdminClient(to_librdkafka(pipeline)[0])
    [configs] = [f.result(15) for f in admin.describe_configs([ConfigResource("broker", "1")]).values()]
    assert configs["replica.lag.time.max.ms"].value == "30000"

    with reader(secured, "broker") as follower:
        assert follower.wait_caught_up(20), follower.refusal()
        wait_for(lambda: follower.current_factor() == 0.5, 10, "the broker's reader holds the pipeline's 0.5")
        assert produce(producer(secured.cluster, "intruder"), secured.topic, CLUSTER,
                       encode(decision(CLUSTER, 0.0, now + dt.timedelta(seconds=1)))) == "TOPIC_AUTHORIZATION_FAILED"
        publish(secured, 0.25, now + dt.timedelta(seconds=2))
        wait_for(lambda: follower.current_factor() == 0.25, 10, "the reader follows the next genuine decision")
    assert follower.stats.records == 2  # the intruder's record never reached the topic

    with reader(secured, "intruder") as outsider:  # no READ either
        assert not outsider.wait_caught_up(3) and outsider.decision(CLUSTER) is None


def test_enforce_may_change_client_quotas_and_the_pipeline_may_not(secured: Secured):
    user = Entity.of("some-app")
    with QuotaAdmin(login(secured.cluster, "enforcer"), timeout_ms=15000) as enforcer:
        enforcer.alter([Change(user, PRODUCER_BYTE_RATE, 4096.0)])
        wait_for(lambda: enforcer.describe().get(user) == {PRODUCER_BYTE_RATE: 4096.0}, 15, "the quota is shown")
        enforcer.alter([Change(user, PRODUCER_BYTE_RATE, None)])
    with QuotaAdmin(login(secured.cluster, "pipeline"), timeout_ms=15000) as pipeline:
        with pytest.raises(QuotaAdminError, match="CLUSTER_AUTHORIZATION_FAILED|ClusterAuthorizationFailed"):
            pipeline.alter([Change(user, PRODUCER_BYTE_RATE, 1.0)])


@pytest.fixture(scope="module")
def rogue_writer(secured: Secured) -> tuple[int, str, str]:
    """A misconfiguration: WRITE on the decision topic granted to another principal (by the bootstrap admin);
    then `acls --apply` runs again, as an operator would after the fact."""
    from confluent_kafka.admin import (
        AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
    )
    admin = AdminClient({"bootstrap.servers": secured.cluster.bootstrap()})
    binding = AclBinding(ResourceType.TOPIC, secured.topic, ResourcePatternType.LITERAL, "User:rogue", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(15)
    return cli("acls", "--config", secured.conf_path, "--reader-principal", "User:broker", "--command-config",
               secured.admin_path, "--apply")


def test_acls_apply_names_another_principal_that_may_write_the_topic(secured: Secured,
                                                                      rogue_writer: tuple[int, str, str]):
    code, out, err = rogue_writer
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "User:rogue WRITE" in warnings[0] and secured.topic in warnings[0], err


def test_a_future_dated_record_from_a_misconfigured_writer_is_refused_and_genuine_records_still_rule(
        secured: Secured, rogue_writer: tuple[int, str, str]):
    if ensure_topic(login(secured.cluster, "pipeline"), secured.topic) == "created":
        publish(secured, 1.0, dt.datetime.now(dt.timezone.utc))
    with reader(secured, "broker") as follower:
        assert follower.wait_caught_up(20), follower.refusal()
        refused_before, factor_before = follower.stats.refused, follower.current_factor()
        forged = decision(CLUSTER, 0.0, FAR_FUTURE, validity=dt.timedelta(hours=23))
        assert produce(producer(secured.cluster, "rogue"), secured.topic, CLUSTER, encode(forged)) is None
        wait_for(lambda: follower.stats.refused > refused_before, 10, "the reader refuses the 9999-12-31 record")
        assert follower.current_factor() == factor_before != 0.0
        assert follower.decision(CLUSTER).observed_at < FAR_FUTURE
        publish(secured, 0.75, dt.datetime.now(dt.timezone.utc))
        wait_for(lambda: follower.current_factor() == 0.75, 10, "the next genuine decision rules")
    # A reader that starts now reads the forged record from the log too, and still ends on the genuine one.
    with reader(secured, "broker") as late:
        assert late.wait_caught_up(20)
        assert late.current_factor() == 0.75 and late.stats.refused >= 1
    # `tail` (the dashboard's intake of the topic) and `enforce`, each logged in as a principal that may read the
    # topic, refuse it too, say so, and follow the genuine decision.
    code, out, err = cli("tail", "--config", config_as(secured, "broker"), "--once")
    assert code == 0 and "record(s) refused" in " ".join(out.split()) and "0.75" in out, out + err
    code, out, err = cli("enforce", config_as(secured, "enforcer"), "--dry-run", "--once", timeout=120)
    assert code == 0 and "factor 0.75" in out and "decision record(s) refused so far" in err, out + err


def config_as(s: Secured, user: str) -> str:
    """The pipeline's configuration as `user` would run a command with it (admin and topic logins are theirs)."""
    props = {cfg.HARD_BYTES: "1", cfg.CLUSTER_NAME: CLUSTER, cfg.OUTPUT_TOPIC: s.topic,
             cfg.CHECKPOINT_PATH: str(Path(s.conf_path).parent / f"{user}-checkpoints"),
             **prefixed(cfg.ADMIN_PREFIX, login(s.cluster, user))}
    return str(write_properties(Path(s.conf_path).parent / f"{user}.properties", props))
