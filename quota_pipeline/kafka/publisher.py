"""The decision topic: created compacted if missing, written by an idempotent acks=all producer."""
from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Mapping

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quota_pipeline.core.properties import PUBLISHER_CLIENT_ID
from quota_pipeline.kafka.refusal import OUTPUT_SETTINGS, ClusterRefused, RefusalWatch
from quota_pipeline.kafka.settings import to_librdkafka

log = logging.getLogger(__name__)

class DeliveryFailed(RuntimeError):
    """A decision was not acknowledged by the output cluster; the micro-batch must fail and be retried."""


def librdkafka_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The producer/admin settings for the output cluster; unusable Java-only settings are dropped."""
    return to_librdkafka(settings)[0]


def ensure_topic(settings: Mapping[str, str], topic: str, timeout: float = 15.0) -> str:
    """Create the compacted topic if missing; replication and min.insync.replicas fit the cluster size."""
    watch = RefusalWatch(settings, OUTPUT_SETTINGS, log)
    admin = AdminClient({**librdkafka_settings(settings), "error_cb": watch})
    metadata = _metadata(admin, watch, timeout)
    if topic in metadata.topics:
        return "exists"
    brokers = len(metadata.brokers) or 1
    replication = min(3, brokers)
    config = {"cleanup.policy": "compact", "min.insync.replicas": str(max(1, replication - 1)),
              # decisions are small and frequent: compact soon so a reader's replay from offset 0 stays short
              "segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.1"}
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=replication,
                                            config=config)], request_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    log.info("created compacted topic %s (replication %d, min.insync.replicas %s)", topic, replication,
             config["min.insync.replicas"])
    return "created"


def _metadata(admin: AdminClient, watch: RefusalWatch, timeout: float) -> Any:
    """The cluster's metadata; a refused login or certificate raises ClusterRefused at once (one line naming
    the listener) instead of a transport error after the whole timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
        except KafkaException:
            admin.poll(0)  # serves error_cb
            if watch.message:
                raise ClusterRefused(watch.message) from None
            if time.monotonic() >= deadline:
                raise


class Publisher:
    """Publishes decision records in order; `publish` returns only when every record is acknowledged."""

    def __init__(self, settings: Mapping[str, str], topic: str, flush_timeout: float | None = None) -> None:
        conf = librdkafka_settings(settings)
        # A client id of its own, exempt from every throttle (quota.pipeline.excluded.client.ids), so that a
        # throttled cluster still receives the decision that releases it.
        conf.setdefault("client.id", PUBLISHER_CLIENT_ID)
        conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "max.in.flight.requests.per.connection": 5,
                     "log_level": 4})  # librdkafka logs every idle disconnect at info level
        self.producer = Producer(conf)
        self.topic = topic
        # A micro-batch waits for its acknowledgements as long as a delivery may take (delivery.timeout.ms).
        self.flush_timeout = flush_timeout if flush_timeout is not None else \
            int(conf.get("delivery.timeout.ms", "30000")) / 1000 + 2

    def publish(self, records: Iterable[tuple[str, str]]) -> int:
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        n = 0
        for key, value in records:
            while True:
                try:
                    self.producer.produce(self.topic, key=key.encode(), value=value.encode(), on_delivery=delivered)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            n += 1
        remaining = self.producer.flush(self.flush_timeout)
        if remaining or errors:
            # The batch is re-run from the checkpoint and publishes these again, in order: drop what is still
            # queued so that a late delivery cannot land after the re-run's newer records.
            self.producer.purge(in_queue=True, in_flight=False)
            self.producer.poll(0)
            raise DeliveryFailed(f"{remaining} decision(s) unacknowledged after {self.flush_timeout:.0f}s, "
                                 f"{len(errors)} failed ({'; '.join(errors[:3])}); the batch will be retried")
        return n

    def abandon(self) -> None:
        """Drop whatever is still queued (the batch is re-run from the checkpoint) without waiting."""
        self.producer.purge(in_queue=True, in_flight=True)
        self.producer.flush(0)

    def close(self) -> None:
        self.producer.flush(self.flush_timeout)
