"""Signed decisions on a real Apache Kafka broker from KAFKA_HOME whose decision topic anyone may write.

One combined node loads both plugins (the quota callback and StopAuthorizer, delegating to StandardAuthorizer with
allow.everyone.if.no.acl.found=true and no ACLs: every client may write every topic, the decision topic included).
The pipeline's own publisher signs its records (quota.pipeline.signing.keys). A foreign writer's records, whatever
their dates, an old genuine record written again, and a record carrying a genuine header over another value change
nothing (all refused and counted): the stop stays in force on the broker, for the Python reader and on the
dashboard; the pipeline's next
record still lifts it. The broker keeps its last decision beside its own data (the first of log.dirs).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Iterator

import pytest

from quota_pipeline.reader.reader import Reader
from quota_pipeline.core import config as cfg
from quota_pipeline.core.signing import HEADER, SigningKey, sign
from quota_pipeline.dashboard.feed import Feed
from quota_pipeline.kafka.publisher import Publisher
from harness.kafka_client import create_topic, decision, wait_until
from harness.kafka import SELF_PLAINTEXT, RealKafka
from tests.support.plugin_brokers import CALLBACK, callback_broker, server_log
from tests.realkafka.test_stop_authorizer import AUTHORIZER, OneRecord, _create_data_topic, refused, wait_for_answer

CLUSTER = "signed-test"
DECISIONS = "__quota_throttle_factors"
K1 = SigningKey("k1", "k1-secret-0123456789abcdef0123456789")
K2 = SigningKey("k2", "k2-secret-abcdefghijklmnopqrstuvwxyz")
KEYS = f"{K1.key_id}:{K1.secret},{K2.key_id}:{K2.secret}"


@pytest.fixture(scope="module")
def signed_broker(callback_jar: Path) -> Iterator[RealKafka]:  # noqa: F811
    with callback_broker(callback_jar, CALLBACK, {
            "quota.pipeline.cluster.name": CLUSTER,
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "true",
            "quota.pipeline.signing.keys": KEYS,
            "quota.pipeline.output.kafka.bootstrap.servers": SELF_PLAINTEXT,
            "quota.pipeline.output.topic.on.this.cluster": "true",
            "client.quota.callback.static.throttle.factor.validity.duration": "PT5M"}) as cluster:
        create_topic(cluster.bootstrap(), DECISIONS)
        _create_data_topic(cluster.bootstrap(), "data")
        yield cluster


def value_of(factor: float, observed: dt.datetime) -> str:
    return json.dumps(decision(CLUSTER, factor, observed_at=observed).to_json())


def foreign_write(bootstrap: str, records: list[tuple[bytes | None, bytes | None, list | None]]) -> None:
    """Any client of the cluster: no ACL stops it from writing the decision topic."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "client.id": "mallory"})
    errors: list = []
    for key, value, headers in records:
        producer.produce(DECISIONS, key=key, value=value, headers=headers,
                         on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
    assert producer.flush(10) == 0 and not errors, errors


def test_only_the_pipelines_signed_records_move_the_factor(signed_broker: RealKafka):
    cluster = signed_broker
    bootstrap = cluster.bootstrap()
    conf = cfg.parse({cfg.BOOTSTRAP: bootstrap, cfg.HARD_BYTES: "1000", cfg.CLUSTER_NAME: CLUSTER,
                      cfg.SIGNING_KEYS: KEYS}, "<test>")
    publisher = Publisher({"bootstrap.servers": bootstrap}, DECISIONS, signing_key=conf.signing_keys[0])
    reader = Reader(conf).start()
    feed = Feed.of(conf).start()
    app = OneRecord(bootstrap)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        old_release = value_of(1.0, now - dt.timedelta(seconds=20))
        publisher.publish([(CLUSTER, old_release), (CLUSTER, value_of(0.0, now - dt.timedelta(seconds=10)))])
        wait_for_answer(app, "data", want_refused=True)
        assert wait_until(lambda: reader.current_factor() == 0.0, timeout=15)

        now = dt.datetime.now(dt.timezone.utc)
        key = CLUSTER.encode()
        forged = [value_of(1.0, now + offset).encode() for offset in (
            dt.timedelta(0), dt.timedelta(seconds=25), dt.timedelta(days=365), -dt.timedelta(days=1))]
        other_key = SigningKey("k1", "mallory-guessed-0123456789abcdef0123")
        attacks = [(key, v, None) for v in forged] + [
            (key, forged[0], [(HEADER, sign(other_key, key, forged[0]))]),  # the genuine key id, another secret
            (key, forged[0], [(HEADER, sign(K1, key, old_release.encode()))]),  # a genuine header, another value
            (key, forged[0], [(HEADER, b"k1:" + b"0" * 64)]),
            (key, None, None),  # a tombstone
            (key, old_release.encode(), [(HEADER, sign(K1, key, old_release.encode()))]),  # a genuine record again
        ]
        foreign_write(bootstrap, attacks)
        # The Python reader refuses 8 of them, the genuine record written again too (older than one read before it);
        # the tombstone is absence (a compacted topic refuses a record without a key itself).
        try:
            wait_until(lambda: reader.stats.refused >= 8, timeout=15)
        except AssertionError:
            raise AssertionError(f"the reader read {reader.stats}") from None
        assert wait_until(lambda: feed.history.refused_total >= 8, timeout=15)
        # The broker's follower reads the same records on its own schedule: once it has refused the first of them
        # (it logs the first refusal at once, later ones at most once a period), the stop must hold on and on.
        assert wait_until(lambda: "refused a decision record" in server_log(cluster), timeout=30), \
            "the broker's follower never refused the foreign records"
        for _ in range(10):
            assert refused(app.send("data")), "a foreign record lifted the stop on the broker"
        assert reader.current_factor() == 0.0 and reader.answer().basis == "record"
        assert feed.overview()[0].factor == 0.0
        assert "a record written again" in reader.stats.last_refusal.reason  # the replay, written last
        log = server_log(cluster)
        assert "refused a decision record" in log and "carries no quota-pipeline-signature header" in log
        assert KEYS not in log and K1.secret not in log, "the keys are never logged"
        assert "only records signed with key k1 or k2 taken" in log

        # The pipeline's next record still lifts the stop (the other key of a rotation included).
        rotated = Publisher({"bootstrap.servers": bootstrap}, DECISIONS, signing_key=conf.signing_keys[1])
        rotated.publish([(CLUSTER, value_of(1.0, dt.datetime.now(dt.timezone.utc)))])
        rotated.close()
        wait_for_answer(app, "data", want_refused=False)
        assert wait_until(lambda: reader.current_factor() == 1.0, timeout=15)

        # The broker keeps the last decision it applied beside its own data, signature and all.
        state = Path(cluster.log_dirs[1][0]) / f"{CLUSTER}.decision.json"
        assert wait_until(state.is_file, timeout=10)
        assert state.read_bytes().startswith(HEADER.encode() + b": k2:")
    finally:
        publisher.close()
        reader.close()
        feed.close()
