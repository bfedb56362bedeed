"""The decision topic: created compacted if missing, written by an idempotent acks=all producer."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable, Mapping

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.properties import PUBLISHER_CLIENT_ID
from quota_pipeline.core.signing import HEADER, SigningKey, sign
from quota_pipeline.kafka.refusal import OUTPUT_SETTINGS, ClusterRefused, RefusalWatch
from quota_pipeline.kafka.settings import to_librdkafka
from quota_pipeline.kafka.stall import request_timeout_ms

log = logging.getLogger(__name__)
# librdkafka's own lines (a coordinator loading, a broker reconnecting): `run` writes them to its log file, or shows them
# with -v; the job reports what they mean for it in its own words (a stall, a failed micro-batch).
LIBRDKAFKA_LOG = logging.getLogger("quota_pipeline.librdkafka")

# An acknowledgement takes milliseconds; one still missing after this long is a stall worth one log line.
STALL_LOG_AFTER_S = 3.0
FLUSH_STEP_S = 0.5  # the wait for acknowledgements looks at the clock this often
METADATA_TIMEOUT_S = 5.0  # the stall line's partition metadata (a fresh connection on a busy cluster)


class DeliveryFailed(RuntimeError):
    """A decision was not acknowledged by the output cluster; the micro-batch must fail and be retried."""


def librdkafka_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The producer/admin settings for the output cluster; unusable Java-only settings are dropped."""
    return to_librdkafka(settings)[0]


def ensure_topic(settings: Mapping[str, str], topic: str, timeout: float = 15.0) -> str:
    """Create the compacted topic if missing; replication and min.insync.replicas fit the cluster size."""
    watch = RefusalWatch(settings, OUTPUT_SETTINGS, log)
    # librdkafka's own log off: the watch reports a refusal once; librdkafka wrote each failed attempt to stderr
    # from its own thread, sometimes after the command's one error line.
    admin = AdminClient({**librdkafka_settings(settings), "error_cb": watch, "log_level": 0})
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


def replica_lag_ms(settings: Mapping[str, str], timeout: float = 5.0) -> int:
    """The largest replica.lag.time.max.ms among the output cluster's brokers (DescribeConfigs on each); raises
    when the cluster cannot be reached or refuses (DescribeConfigs needs the cluster's DescribeConfigs ACL)."""
    from quota_pipeline.kafka.stall import REPLICA_LAG

    # Quiet: an unreachable cluster is reported once by the caller, not per connection attempt.
    watch = RefusalWatch(settings, OUTPUT_SETTINGS, logging.getLogger(f"{__name__}.quiet"))
    watch.log.setLevel(logging.CRITICAL)
    admin = AdminClient({**librdkafka_settings(settings), "error_cb": watch, "log_level": 0})
    metadata = _metadata(admin, watch, timeout)
    # librdkafka takes one BROKER resource per call (each goes to that broker); asked all at once, then awaited.
    futures = [future for b in sorted(metadata.brokers) for future in admin.describe_configs(
        [ConfigResource(ResourceType.BROKER, str(b))], request_timeout=timeout).values()]
    values = []
    for future in futures:
        entry = future.result(timeout).get(REPLICA_LAG)
        if entry is not None and entry.value is not None:
            values.append(int(entry.value))
    if not values:
        raise LookupError(f"no broker reported {REPLICA_LAG}")
    return max(values)


def stall_warning(configs: list[Any], timeout: float = 3.0) -> tuple[str | None, str | None]:
    """(the warning of kafka.stall.warning_for, None) after reading the output cluster's replica.lag.time.max.ms, or
    (None, why it could not be read) when the cluster is unreachable within `timeout` or refuses."""
    from quota_pipeline.kafka.stall import REPLICA_LAG, warning_for

    settings = configs[0].output_settings
    if not settings.get("bootstrap.servers"):
        return None, "no output cluster configured"
    try:
        lag = replica_lag_ms(settings, timeout)
    except Exception as exc:  # noqa: BLE001 - any client error means the same here: not checked
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, (f"could not read {REPLICA_LAG} from the output cluster {settings['bootstrap.servers']} "
                      f"within {timeout:g} s ({reason}); the validity was not checked against its acks=all stalls")
    return warning_for(configs, lag), None


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
    """Publishes decision records in order; `publish` returns only when every record is acknowledged.

    `on_acknowledged(key)` is called for every record the output cluster acknowledged, as it is. A wait longer than
    STALL_LOG_AFTER_S logs one line naming what the publisher waits for, and one more when it ends. With a
    `signing_key` (the first of quota.pipeline.signing.keys) each record carries its signature header
    (core/signing.py), which readers given the keys require."""

    def __init__(self, settings: Mapping[str, str], topic: str, flush_timeout: float | None = None, *,
                 on_acknowledged: Callable[[str], None] | None = None, clock: Clock = SYSTEM,
                 signing_key: SigningKey | None = None) -> None:
        conf = librdkafka_settings(settings)
        # A client id of its own, exempt from every throttle (quota.pipeline.excluded.client.ids), so that a
        # throttled cluster still receives the decision that releases it.
        conf.setdefault("client.id", PUBLISHER_CLIENT_ID)
        self._metadata_conf = {**conf, "log_level": 0}  # for the stall line's own client (describe_stall)
        conf.update({"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "max.in.flight.requests.per.connection": 5,
                     "log_level": 4})  # librdkafka logs every idle disconnect at info level
        self.producer = Producer(conf, logger=LIBRDKAFKA_LOG)
        self.topic = topic
        self.on_acknowledged = on_acknowledged
        self.clock = clock
        self.request_timeout_ms = request_timeout_ms(conf)
        # A micro-batch waits for its acknowledgements as long as a delivery may take (delivery.timeout.ms).
        self.flush_timeout = flush_timeout if flush_timeout is not None else \
            int(conf.get("delivery.timeout.ms", "30000")) / 1000 + 2
        self._pending: dict[str, int] = {}  # key -> records not acknowledged yet
        self.signing_key = signing_key

    def publish(self, records: Iterable[tuple[str, str]]) -> int:
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            key = msg.key().decode() if msg.key() is not None else ""
            self._pending[key] = self._pending.get(key, 1) - 1
            if self._pending[key] <= 0:
                del self._pending[key]
            if err is not None:
                errors.append(str(err))
            elif self.on_acknowledged is not None:
                self.on_acknowledged(key)

        n = 0
        for key, value in records:
            key_bytes, value_bytes = key.encode(), value.encode()
            headers = None if self.signing_key is None else [
                (HEADER, sign(self.signing_key, key_bytes, value_bytes))]
            while True:
                try:
                    self.producer.produce(self.topic, key=key_bytes, value=value_bytes, headers=headers,
                                          on_delivery=delivered)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self._pending[key] = self._pending.get(key, 0) + 1
            n += 1
        remaining = self._await_acknowledgements()
        if remaining or errors:
            # The batch is re-run from the checkpoint and publishes these again, in order: drop what is still
            # queued so that a late delivery cannot land after the re-run's newer records.
            self.producer.purge(in_queue=True, in_flight=False)
            self.producer.poll(0)
            self._pending.clear()
            raise DeliveryFailed(f"{remaining} decision(s) unacknowledged after {self.flush_timeout:.0f}s, "
                                 f"{len(errors)} failed ({'; '.join(errors[:3])}); the batch will be retried")
        return n

    def _await_acknowledgements(self) -> int:
        """Flush until every record is acknowledged or the flush timeout passed; the records still unacknowledged.
        A stall is logged once, when it passes STALL_LOG_AFTER_S, and once when it ends."""
        started = self.clock.monotonic()
        deadline = started + self.flush_timeout
        stalled = False
        while True:
            remaining = self.producer.flush(max(0.0, min(FLUSH_STEP_S, deadline - self.clock.monotonic())))
            waited = self.clock.monotonic() - started
            if not remaining or self.clock.monotonic() >= deadline:
                break
            if not stalled and waited >= STALL_LOG_AFTER_S:
                stalled = True
                log.warning("%s", self.describe_stall(remaining, waited, deadline - self.clock.monotonic()))
        if stalled and not remaining:
            log.warning("publisher: the output cluster acknowledged the waiting decision(s) after %.1f s; the next "
                        "micro-batch observes afresh and publishes the current decision", waited)
        return remaining

    def describe_stall(self, remaining: int, waited: float, left: float) -> str:
        """One line: the records waiting, the partition(s) they wait on (leader, replicas, in-sync replicas), the
        acknowledgement acks=all needs, for how long it has waited and will still wait."""
        try:
            # Asked through a client of its own: a broker serves one request per connection at a time, so on the
            # producer's connection to the leader a metadata request would queue behind the produce that waits.
            timeout = min(METADATA_TIMEOUT_S, max(1.0, left))  # never delays the batch's failure by much
            meta = AdminClient(self._metadata_conf).list_topics(self.topic, timeout=timeout) \
                .topics[self.topic]
            where = "; ".join(f"partition {p.id} leader {p.leader}, replicas {list(p.replicas)}, in sync "
                              f"{list(p.isrs)}" for p in sorted(meta.partitions.values(), key=lambda p: p.id))
        except Exception as exc:  # noqa: BLE001 - the line is still worth writing without the metadata
            where = f"partition metadata unavailable ({str(exc).splitlines()[0]})"
        keys = ", ".join(sorted(self._pending)) or "?"
        return (f"publisher: {remaining} decision(s) for {keys} not acknowledged for {waited:.1f} s: topic "
                f"{self.topic}, {where}; acks=all waits until every in-sync replica has the record (a replica on "
                f"a failed or full log dir holds it for replica.lag.time.max.ms after its last fetch, until the "
                f"leader drops it from the ISR; if the controller dropped it first, until the produce request times "
                f"out, request.timeout.ms {self.request_timeout_ms}, and is retried: docs/design.md, \"Decision "
                f"stalls\"); waiting {left:.0f} s more before the micro-batch fails and is retried")

    def abandon(self) -> None:
        """Drop whatever is still queued (the batch is re-run from the checkpoint) without waiting."""
        self.producer.purge(in_queue=True, in_flight=True)
        self.producer.flush(0)
        self._pending.clear()

    def close(self) -> None:
        self.producer.flush(self.flush_timeout)
