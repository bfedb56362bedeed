"""Follows the decision topic as brokers' readers do (assign from the beginning, no group) and says how it stands."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Mapping

from quota_pipeline.kafka.background import Background, close_quietly
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.config import Config
from quota_pipeline.dashboard.view import FeedStatus
from quota_pipeline.kafka.settings import to_librdkafka

log = logging.getLogger(__name__)
# librdkafka's own log lines (connection refused, ...): the feed status says the same in words.
LIBRDKAFKA_LOG = logging.getLogger("quota_pipeline.dashboard.librdkafka")
CLIENT_ID = "quota-pipeline-dashboard"

# key, value, where, headers (the signature travels in one)
RecordSink = Callable[[bytes | None, bytes | None, str, list[tuple[str, Any]] | None], Any]


def consumer_settings(config: Config) -> dict[str, Any]:
    """librdkafka settings for the output cluster (quota.pipeline.output.kafka.*, else the admin settings)."""
    settings, parsed = to_librdkafka(config.output_settings)
    for key in parsed.ignored:
        log.warning("%s is not used by the dashboard's consumer; ignored", key)
    return {**settings, "client.id": CLIENT_ID}


class TopicFollower(Background):
    """Reads every record of `topic` from the beginning and hands it to `on_record(key, value, where)`.

        follower = TopicFollower(consumer_settings(config), config.output_topic, history.apply).start()
        follower.status()   # FeedStatus: connecting | unreachable | topic-missing | following
        follower.close()

    While the topic or its cluster is missing it keeps retrying and says so in `status()`.
    """

    thread_name = "dashboard-follower"

    def __init__(self, settings: Mapping[str, Any], topic: str, on_record: RecordSink, *, clock: Clock = SYSTEM,
                 poll_seconds: float = 0.2, retry_seconds: float = 2.0, probe_seconds: float = 5.0,
                 consumer_factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        super().__init__()
        self.topic = topic
        self.bootstrap = str(settings.get("bootstrap.servers", "?"))
        self._on_record = on_record
        self._clock = clock
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self._probe_seconds = probe_seconds
        self._factory = consumer_factory
        self._conf: dict[str, Any] = {
            **settings,
            "group.id": CLIENT_ID,  # librdkafka requires one; never joined (assign, no commits)
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "queued.max.messages.kbytes": 16384,  # the prefetch buffer (64 MB by default) is most of the memory
            "error_cb": self._on_client_error,
        }
        self._lock = threading.Lock()
        self._status = FeedStatus("connecting", f"connecting to {self.bootstrap}", clock.now(), topic, self.bootstrap)

    def status(self) -> FeedStatus:
        with self._lock:
            return self._status

    def _set(self, state: str, message: str, caught_up: bool | None = None) -> None:
        with self._lock:
            old = self._status
            since = old.since if old.state == state else self._clock.now()
            done = old.caught_up if caught_up is None else caught_up
            self._status = FeedStatus(state, message, since, self.topic, self.bootstrap, done)
        if old.state != state:
            (log.info if state == "following" else log.warning)("decision topic: %s", message)

    def _on_client_error(self, error: Any) -> None:
        """librdkafka's error callback: all brokers down, authentication failures."""
        from confluent_kafka import KafkaError
        # Not _TRANSPORT: a broker closing an idle connection is no outage; the next probe would say otherwise.
        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION, KafkaError._SSL,
                            KafkaError.SASL_AUTHENTICATION_FAILED):
            self._set("unreachable", self._unreachable(error.str()))

    def _unreachable(self, reason: str) -> str:
        return (f"cannot reach the Kafka cluster at {self.bootstrap} ({reason}); "
                f"retrying every {self._retry_seconds:g} s")

    def _new_consumer(self) -> Any:
        if self._factory is not None:
            return self._factory(dict(self._conf))
        from confluent_kafka import Consumer
        return Consumer(dict(self._conf), logger=LIBRDKAFKA_LOG)

    def _run(self) -> None:
        while not self._stop.is_set():
            consumer = None
            try:
                consumer = self._new_consumer()
                self._follow(consumer)
            except Exception as exc:  # a client failure: say so and start over with a new consumer
                log.warning("following %s failed: %s", self.topic, exc, exc_info=log.isEnabledFor(logging.DEBUG))
                self._set("unreachable", f"following {self.topic} failed ({exc}); starting over in "
                                         f"{self._retry_seconds:g} s", caught_up=False)
                self._stop.wait(self._retry_seconds)
            finally:
                close_quietly(consumer)

    def _follow(self, consumer: Any) -> None:
        assigned: frozenset[int] = frozenset()
        next_probe = self._clock.monotonic()
        while not self._stop.is_set():
            if self._clock.monotonic() >= next_probe:
                partitions = self._probe(consumer)
                if partitions is not None and partitions != assigned:
                    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
                    consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(partitions)])
                    assigned = partitions
                elif partitions == frozenset() and assigned:
                    consumer.unassign()  # the topic was deleted: read it again from the start once it is back
                    assigned = frozenset()
                next_probe = self._clock.monotonic() + (self._probe_seconds if assigned else self._retry_seconds)
            if not assigned:
                consumer.poll(min(self._retry_seconds, 0.5))  # serves error_cb: all brokers down, authentication
                continue
            self._consume(consumer)

    def _consume(self, consumer: Any) -> None:
        batch = consumer.consume(num_messages=500, timeout=self._poll_seconds)
        if not batch and not self.status().caught_up and self.status().state == "following":
            self._set("following", self._following(), caught_up=True)
        for msg in batch:
            if msg.error():
                log.debug("dashboard consumer: %s", msg.error())
                continue
            if self.status().state != "following":
                self._set("following", self._following())
            self._on_record(msg.key(), msg.value(), f"at {msg.topic()}/{msg.partition()}@{msg.offset()}",
                            msg.headers())

    def _following(self) -> str:
        return f"following {self.topic} on {self.bootstrap}"

    def _probe(self, consumer: Any) -> frozenset[int] | None:
        """The topic's partitions; an empty set when the topic is missing, None when the cluster did not answer."""
        try:
            metadata = consumer.list_topics(self.topic, timeout=max(1.0, min(5.0, self._retry_seconds)))
        except Exception as exc:  # KafkaException: transport, timeout, authentication
            reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
            self._set("unreachable", self._unreachable(reason))
            return None
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            self._set("topic-missing", f"topic {self.topic} does not exist on {self.bootstrap}: is the streaming "
                                       f"job running? Retrying every {self._retry_seconds:g} s", caught_up=False)
            return frozenset()
        if self.status().state != "following":
            self._set("following", self._following())
        return frozenset(topic.partitions)
