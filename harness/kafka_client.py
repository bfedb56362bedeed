"""What tests and benchmarks send through a broker, Tansu or Apache Kafka: decision records, a compacted topic, records
published, a condition awaited."""
from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any, Callable, Iterable

from quota_pipeline.core.model import DecisionSource, Status
from quota_pipeline.core.record import ThrottleDecision

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)


def decision(cluster: str = "c1", factor: float = 0.0, observed_at: dt.datetime = T0,
             validity: dt.timedelta | None = dt.timedelta(minutes=5),
             source: DecisionSource = DecisionSource.OBSERVATION) -> ThrottleDecision:
    return ThrottleDecision(
        cluster_id=cluster, observed_at=observed_at, decided_at=observed_at, throttle_factor=factor, source=source,
        valid_until=None if source is DecisionSource.FALLBACK or validity is None else observed_at + validity,
        status=Status.SUCCESS, active_brokers=3, active_log_dirs=6, missing_brokers=(),
        limit={"hard": {"type": "min.available.bytes", "value": 1000}, "soft": None},
        violations=1 if factor == 0.0 else 0, worst_volume=None, min_available_ratio=0.1)


def encode(d: ThrottleDecision) -> bytes:
    return json.dumps(d.to_json()).encode()


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config={"cleanup.policy": "compact"})]).values():
        future.result(10)


def publish(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(10) == 0


def wait_for(attempt: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    """The first truthy result of `attempt`, or AssertionError naming `what` and the last result."""
    deadline = time.monotonic() + timeout
    while True:
        result = attempt()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}; last: {result!r}")
        time.sleep(every)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    return wait_for(predicate, timeout, "the condition holds", every=interval)
