"""Signed decisions on the Python side: the pipeline's publisher signs, and the reader (hence `enforce`), the
dashboard and `tail` refuse what is not signed with a configured key. The Java plugins pass the same shared vectors
(tests/vectors, `signed_records_only_when_keys_are_set`); real Kafka: tests/realkafka/test_signed_decisions.py."""
from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from quota_pipeline.reader.reader import Reader
from quota_pipeline.commands import validate
from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.signing import HEADER, SigningKey, parse_keys, sign
from quota_pipeline.dashboard.feed import Feed
from quota_pipeline.dashboard.history import History
from quota_pipeline.kafka.publisher import Publisher
from harness.kafka_client import T0, decision, encode

K1 = SigningKey("k1", "k1-secret-0123456789abcdef0123456789")
K2 = SigningKey("k2", "k2-secret-abcdefghijklmnopqrstuvwxyz")
KEYS = f"k1:{K1.secret},k2:{K2.secret}"


def make_config(**props: str) -> cfg.Config:
    return cfg.parse({cfg.BOOTSTRAP: "127.0.0.1:1", cfg.HARD_BYTES: "1000", cfg.CLUSTER_NAME: "c1",
                      cfg.SIGNING_KEYS: KEYS, **props}, "<test>")


def signed(key: SigningKey, value: bytes, record_key: bytes = b"c1") -> list[tuple[str, bytes]]:
    return [(HEADER, sign(key, record_key, value))]


def test_the_mac_is_the_one_openssl_computes():
    # printf '\x00\x00\x00\x02c1{"a":1}' | openssl dgst -sha256 -mac HMAC -macopt key:k1-secret-...: the Java
    # DecisionSignatureTest pins the same bytes.
    assert sign(K1, b"c1", b'{"a":1}') == b"k1:918eb5b439ca6cc0a061b3245a221920f6b967713ddc500db74eefb912d3e715"


def test_the_reader_takes_only_records_signed_with_a_configured_key():
    reader = Reader(make_config(), clock=ManualClock(T0 + dt.timedelta(seconds=1)))
    stop = encode(decision("c1", 0.0, T0))
    assert reader.apply_record(b"c1", stop, " at d/0@0", signed(K1, stop))
    release = encode(decision("c1", 1.0, T0 + dt.timedelta(milliseconds=500)))
    foreign = SigningKey("k1", "someone-else-0123456789abcdef012345")
    for headers in (None, [], signed(foreign, release), signed(K1, release, b"c2"), [(HEADER, b"k1:nothex")],
                    signed(SigningKey("k9", K1.secret), release)):
        assert not reader.apply_record(b"c1", release, " at d/0@1", headers)
    assert reader.stats.refused == 6 and reader.current_factor() == 0.0
    assert "not hold" in reader.stats.last_refusal.reason and "k9" in reader.stats.last_refusal.reason
    assert reader.apply_record(b"c1", release, " at d/0@2", signed(K2, release))  # the other key of a rotation
    assert reader.current_factor() == 1.0
    assert not reader.apply_record(b"c1", stop, " at d/0@3", signed(K1, stop))  # genuine, written again: a replay
    assert reader.current_factor() == 1.0 and reader.stats.refused == 7
    assert "a record written again" in reader.stats.last_refusal.reason


def test_the_dashboard_and_tail_refuse_and_report_an_unsigned_record():
    clock = ManualClock(T0 + dt.timedelta(seconds=1))
    history = History(clock=clock, signing_keys=parse_keys(KEYS))
    stop = encode(decision("c1", 0.0, T0))
    assert history.apply(b"c1", stop, "at d/0@0", signed(K1, stop))
    forged = encode(decision("c1", 1.0, T0 + dt.timedelta(milliseconds=500)))
    assert not history.apply(b"c1", forged, "at d/0@1")
    assert not history.apply(b"c1", forged, "at d/0@2", signed(K1, forged, b"c2"))
    assert history.refused_total == 2 and "does not match key" in history.last_refused.reason
    assert history.records()[0].latest.throttle_factor == 0.0

    refused: list[Any] = []  # what `tail` prints and the page's banner shows
    feed = Feed.of(make_config(), clock=clock, on_refused=refused.append)
    feed.follower._on_record(b"c1", forged, "at d/0@3", None)
    assert len(refused) == 1 and "carries no quota-pipeline-signature header" in refused[0].reason
    page = feed.page()
    assert page["counts"]["refused_records"] == 1 and "signature" in page["last_refused"]["reason"]


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, Any]] = []

    def produce(self, topic: str, key: bytes, value: bytes, headers: Any = None, on_delivery: Any = None) -> None:
        self.sent.append((key, value, headers))
        on_delivery(None, type("Msg", (), {"key": lambda self: key})())

    def flush(self, timeout: float) -> int:
        return 0


def test_the_publisher_signs_each_record_with_the_first_key():
    publisher = Publisher({"bootstrap.servers": "127.0.0.1:1"}, "decisions", signing_key=make_config().signing_keys[0])
    publisher.producer = _Producer()
    value = encode(decision("c1", 0.0, T0)).decode()
    publisher.publish([("c1", value)])
    key, sent, headers = publisher.producer.sent[0]
    assert headers == [(HEADER, sign(K1, b"c1", sent))]
    reader = Reader(make_config(), clock=ManualClock(T0 + dt.timedelta(seconds=1)))
    assert reader.apply_record(key, sent, "", headers)


def test_validate_never_prints_the_keys(tmp_path, capsys):
    conf = tmp_path / "c.properties"
    conf.write_text(f"{cfg.BOOTSTRAP}=127.0.0.1:1\n{cfg.HARD_BYTES}=1000\n{cfg.SIGNING_KEYS}={KEYS}\n")
    validate.run(type("Args", (), {"config": str(conf), "offline": True})())
    out = capsys.readouterr().out
    assert f"{cfg.SIGNING_KEYS}=******" in out and K1.secret not in out and K2.secret not in out
    bad = tmp_path / "bad.properties"
    bad.write_text(f"{cfg.BOOTSTRAP}=127.0.0.1:1\n{cfg.HARD_BYTES}=1000\n{cfg.SIGNING_KEYS}=k1:tooshort-secret\n")
    with pytest.raises(SystemExit):
        validate.run(type("Args", (), {"config": str(bad), "offline": True})())
    err = capsys.readouterr().err
    assert "at least 32 characters" in err and "tooshort" not in err


def test_one_job_signs_with_one_key():
    from quota_pipeline.streaming.query import JobConfigError, check_runnable

    first = make_config(**{cfg.CLUSTER_NAME: "a"})
    other = make_config(**{cfg.CLUSTER_NAME: "b", cfg.SIGNING_KEYS: f"k2:{K2.secret}"})
    with pytest.raises(JobConfigError, match="one job signs its records with one key"):
        check_runnable([first, other])
