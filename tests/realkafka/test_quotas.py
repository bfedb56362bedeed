"""`quota-pipeline quotas` and the reader library against Apache Kafka from KAFKA_HOME; the simulator's quota
validation and Describe filters checked against the real controller's answers."""
from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from typing import Any, Iterator

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka.protocol.admin import DescribeClientQuotasRequest

from quota_pipeline.reader.reader import UNLIMITED, Reader
from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE, Entity
from quota_pipeline.kafka.publisher import ensure_topic
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin, QuotaAdminError
from quota_pipeline.simulator import Simulator
from harness import kafka_config as rc
from harness.kafka import RealKafka
from harness.kafka_props import (
    client_properties, pipeline_properties, prefixed, publish_decisions, restore_quotas, wait_for,
    write_properties,
)
from tests.support.simulator_fixtures import roundtrip


@pytest.fixture
def quota_admin(real_kafka: RealKafka) -> Iterator[QuotaAdmin]:
    """A quota admin on the shared cluster; whatever a test changes is put back afterwards."""
    with QuotaAdmin(client_properties(real_kafka)) as admin:
        before = admin.describe()
        try:
            yield admin
        finally:
            restore_quotas(admin, before)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_quotas_set_list_explain_delete_on_a_real_cluster(real_kafka: RealKafka, quota_admin: QuotaAdmin,
                                                         capsys, tmp_path):
    conf = str(write_properties(tmp_path / "cluster.properties", pipeline_properties(real_kafka)))
    user = f"u{uuid.uuid4().hex[:6]}"
    for args in (["--user", user, "--producer-byte-rate", "1000"],
                 ["--default-user", "--client-id", "app", "--producer-byte-rate", "2000"],
                 ["--default-client-id", "--producer-byte-rate", "3000", "--request-percentage", "50"]):
        code, out, err = cli(capsys, "quotas", "set", "--config", conf, *args)
        assert (code, err) == (0, ""), err
    expected = {Entity.of(user): {PRODUCER_BYTE_RATE: 1000.0},
                Entity.of(default_user=True, client_id="app"): {PRODUCER_BYTE_RATE: 2000.0},
                Entity.of(default_client_id=True): {PRODUCER_BYTE_RATE: 3000.0, "request_percentage": 50.0}}

    def listed() -> dict[Entity, dict[str, float]]:
        code, out, _ = cli(capsys, "quotas", "list", "--config", conf, "--json")
        assert code == 0
        return {Entity.from_json(item["entity"]): {k: v for k, v in item["values"].items() if v is not None}
                for item in json.loads(out)["entities"]}
    wait_for(lambda: listed() == expected, 10, "list shows the three entities")

    def effective(u: str, c: str) -> dict[str, Any]:
        code, out, _ = cli(capsys, "quotas", "explain", "--config", conf, "--user", u, "--client-id", c, "--json")
        assert code == 0
        return json.loads(out)["effective"][PRODUCER_BYTE_RATE]
    assert effective(user, "app") == {"value": 1000.0, "level": "user"}
    assert effective("someone", "app") == {"value": 2000.0, "level": "default user+client-id"}
    assert effective("someone", "other") == {"value": 3000.0, "level": "default client-id"}

    code, out, err = cli(capsys, "quotas", "set", "--config", conf, "--user", user, "--producer-byte-rate", "1.5")
    assert code == 1 and out == ""
    assert err == (f"error: AlterClientQuotas refused user={user}: INVALID_REQUEST (producer_byte_rate cannot be a "
                   "fractional value.); fix the values (or the principal's ALTER_CONFIGS permission) and retry\n")
    code, _, _ = cli(capsys, "quotas", "set", "--config", conf, "--user", user, "--producer-byte-rate", "9",
                     "--validate-only")
    assert code == 0
    code, _, _ = cli(capsys, "quotas", "delete", "--bootstrap-server", real_kafka.bootstrap(), "--user", user)
    assert code == 0
    del expected[Entity.of(user)]
    wait_for(lambda: listed() == expected, 10, "the deleted entity is gone and the validated value never came")


# Requests the controller refuses, one entity each (the simulator's validation claims the same answers).
INVALID = [
    (Entity.of("a"), "bogus_rate", 1.0), (Entity.of("a"), "connection_creation_rate", 1.0),
    (Entity.of(ip="10.0.0.1"), PRODUCER_BYTE_RATE, 1.0),
    (Entity.from_mapping({"user": "a", "ip": "10.0.0.1"}), "connection_creation_rate", 1.0),
    (Entity.of(ip="not-an-ip"), "connection_creation_rate", 1.0), (Entity.of(""), PRODUCER_BYTE_RATE, 1.0),
    (Entity.of(client_id=""), PRODUCER_BYTE_RATE, 1.0), (Entity(()), PRODUCER_BYTE_RATE, 1.0),
    (Entity.from_mapping({"group": "g"}), PRODUCER_BYTE_RATE, 1.0),
    (Entity.of(ip="10.0.0.1"), "connection_creation_rate", 2.0 ** 31), (Entity.of("a"), "request_percentage", -1.0),
    (Entity.of("a"), PRODUCER_BYTE_RATE, 1.5), (Entity.of("a"), PRODUCER_BYTE_RATE, 0.0),
    (Entity.of("a"), "consumer_byte_rate", 1e19), (Entity.of("a", "c"), "controller_mutation_rate", 0.0),
]
# DescribeClientQuotas filters: (entity type, match type 0 exact / 1 default / 2 any, name), strict.
FILTERS = [([("user", 0, "alice")], False), ([("user", 0, "alice")], True), ([("user", 1, None)], False),
           ([("user", 2, None)], True), ([("client-id", 2, None)], False),
           ([("user", 2, None), ("client-id", 1, None)], True), ([], False),
           ([("user", 0, "a"), ("user", 1, None)], False), ([("ip", 2, None), ("user", 2, None)], False),
           ([("user", 7, None)], False), ([("group", 2, None)], False)]


def _refusal(admin: QuotaAdmin, entity: Entity, key: str, value: float) -> str:
    try:
        admin.alter([Change(entity, key, value)], validate_only=True)
    except QuotaAdminError as exc:
        return str(exc)
    return "accepted"


def _filtered(port: int, components: list[tuple[str, int, str | None]], strict: bool) -> tuple[int, set[str]]:
    C = DescribeClientQuotasRequest.ComponentData
    response = roundtrip(port, DescribeClientQuotasRequest(
        components=[C(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=strict), 1)
    return response.error_code, {str(Entity.from_mapping({c.entity_type: c.entity_name for c in e.entity}))
                                 for e in response.entries or []}


def test_the_simulator_validates_and_filters_client_quotas_as_the_real_controller(real_kafka: RealKafka,
                                                                                 quota_admin: QuotaAdmin):
    entities = [Entity.of("alice"), Entity.of("alice", "app"), Entity.of(default_user=True),
                Entity.of(client_id="app"), Entity.of("bob", default_client_id=True)]
    with Simulator({"brokers": 1}, port=0) as sim, QuotaAdmin({"bootstrap.servers": sim.bootstrap_servers}) as fake:
        assert [_refusal(quota_admin, *case) for case in INVALID] == [_refusal(fake, *case) for case in INVALID]
        for admin in (quota_admin, fake):
            admin.alter([Change(e, PRODUCER_BYTE_RATE, 1.0) for e in entities])
        wait_for(lambda: set(entities) <= set(quota_admin.describe()), 10, "the real cluster shows the entities")
        real_port = int(real_kafka.bootstrap().rsplit(":", 1)[1])
        assert [_filtered(real_port, *f) for f in FILTERS] == [_filtered(sim.ports[1], *f) for f in FILTERS]


def test_the_reader_follows_decisions_on_a_real_compacted_topic_over_scram(real_kafka: RealKafka):
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    output = client_properties(real_kafka, rc.SASL)
    conf = cfg.parse(pipeline_properties(real_kafka, **prefixed(cfg.OUTPUT_KAFKA_PREFIX, output), **{
        cfg.OUTPUT_TOPIC: topic, cfg.PRODUCE: "10000000", cfg.EXCLUDED: "User:pipeline",
        cfg.VALIDITY: "PT5M", cfg.FALLBACK: "0.5"}))
    assert ensure_topic(conf.output_settings, topic) == "created"
    admin = AdminClient(real_kafka.client_config())
    try:
        assert ensure_topic(conf.output_settings, topic) == "exists"
        [described] = admin.describe_configs([ConfigResource("topic", topic)]).values()
        assert described.result(20)["cleanup.policy"].value == "compact"
        _follow(real_kafka, conf, topic)
    finally:
        admin.delete_topics([topic])[topic].result(30)


def _follow(real_kafka: RealKafka, conf: cfg.Config, topic: str) -> None:
    """Newest decision per cluster by observed_at, the reader's own validity, change callbacks, quota limits."""
    now = dt.datetime.now(dt.timezone.utc)
    publish_decisions(real_kafka, topic, [("c1", 0.0, now), ("c2", 0.25, now),
                                          ("c1", 1.0, now - dt.timedelta(minutes=1)),  # older, published later
                                          ("c3", 0.0, now - dt.timedelta(minutes=10))])  # expired
    changes: list[tuple[str, float, float]] = []
    changed = threading.Event()
    with Reader(conf) as every:  # a reader without a cluster name keeps every cluster's newest decision
        assert every.wait_caught_up(30) and every.refusal() is None
        assert (every.current_factor("c1"), every.current_factor("c2"), every.current_factor("c3")) == \
            (0.0, 0.25, 0.5)
        assert (every.stats.records, every.stats.refused) == (3, 1)  # the older one, published later: refused
    with Reader(conf, cluster="c1") as reader:
        reader.on_change(lambda *change: (changes.append(change), changed.set()))
        assert reader.wait_caught_up(30) and reader.refusal() is None
        assert reader.current_factor() == 0.0
        assert (reader.quota_limit("PRODUCE", "alice"), reader.quota_limit("PRODUCE", "pipeline")) == \
            (1048576 / (32 + 10), UNLIMITED)  # a stop's first limit: a 1 MiB request muted 32 s over Kafka's 10 s
        changed.clear()
        publish_decisions(real_kafka, topic, [("c1", 1.0, now + dt.timedelta(seconds=1))])
        assert changed.wait(15), "the reader did not see the release"
        assert ("c1", 0.0, 1.0) in changes and reader.quota_limit("PRODUCE", "alice") == 10000000.0
