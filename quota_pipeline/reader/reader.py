"""The Reader: follows the decision topic and answers the throttle factor, Strimzi's quota limits and refused writes."""
from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from quota_pipeline.core import model
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.kafka.background import Background, close_quietly
from quota_pipeline.core.config import Config
from quota_pipeline.kafka.refusal import ADMIN_SETTINGS, OUTPUT_SETTINGS, RefusalWatch
from quota_pipeline.kafka.settings import to_librdkafka
from quota_pipeline.core.model import DecisionSource
from quota_pipeline.core.record import ThrottleDecision
from quota_pipeline.core.stop import StopClock
from quota_pipeline.reader.admission import honoured_until, refusal, replay_refusal, signature_refusal
from quota_pipeline.reader.log_text import LogLimiter, printable, unlogged
from quota_pipeline.reader.parsing import parse_decision
from quota_pipeline.reader.quota import MIN_QUOTA, UNLIMITED, QuotaPolicy, QuotaType, QuotaWindows, ResetTracker
from quota_pipeline.reader.write_refusal import RefusalPolicy, StopScope
from quota_pipeline.core.signing import signature_of

log = logging.getLogger(__name__)

__all__ = ["Answer", "MIN_QUOTA", "QuotaType", "Reader", "ReaderStats", "Refusal", "UNLIMITED", "parse_decision"]
METADATA_RETRY_SECONDS = 1.0
REFUSAL_LOG_INTERVAL = dt.timedelta(seconds=10)  # at most one refusal line per this long; the count says the rest

ChangeCallback = Callable[[str, float, float], None]


@dataclass(frozen=True)
class Answer:
    """What current_factor() answers and why: the held record's factor, or the reader's own fallback."""

    factor: float
    basis: str  # "record" | "fallback" | "initial"
    reason: str
    decision: ThrottleDecision | None = None


@dataclass(frozen=True)
class Refusal:
    """A refused record: its key, where it is on the topic (" at topic/partition@offset"), why, and when."""

    key: str | None
    where: str
    reason: str
    at: dt.datetime

    def describe(self) -> str:
        return f"key {printable(self.key)}{self.where}: {self.reason}"


@dataclass
class ReaderStats:
    records: int = 0  # decisions taken
    older: int = 0  # ignored: older than the one held
    skipped: int = 0  # invalid JSON or unknown schema_version
    refused: int = 0  # not signed with a configured key, or dated further ahead of the clock than the skew allowance
    tombstones: int = 0
    last_refusal: Refusal | None = None


class Reader(Background):
    """Follows the compacted decision topic from the beginning (assign, no consumer group).

        reader = Reader(config, clock=...).start()
        reader.on_change(lambda cluster, old, new: ...)   # Kafka: quotaResetRequired -> true
        reader.current_factor("c1"); reader.quota_limit("PRODUCE", "alice")
        reader.close()

    Validity and fallback come from the same Strimzi properties the publisher reads
    (throttle.factor.validity.duration, throttle.factor.fallback); they are applied here, so a broker
    whose publisher went quiet falls back on its own. Only the pipeline may change the factor: a record not signed
    with one of quota.pipeline.signing.keys (when set), or dated
    further ahead of the clock than quota.pipeline.reader.max.clock.skew, is refused (stats.refused,
    stats.last_refusal, one log line), and a valid_until is honoured at most until observed_at + validity + skew.
    A reader given a cluster (quota.pipeline.cluster.name or `cluster=`) keeps only that cluster's decision.
    """

    thread_name = "quota-reader"

    def __init__(self, config: Config, consumer_settings: Mapping[str, str] | None = None, *,
                 cluster: str | None = None, topic: str | None = None,
                 clock: Clock = SYSTEM, poll_seconds: float = 0.2,
                 consumer_factory: Callable[[dict[str, Any]], Any] | None = None) -> None:
        super().__init__()
        self.config = config
        self.cluster = cluster or config.cluster_name
        self.topic = topic or config.output_topic
        self.validity = config.validity
        self.fallback = config.fallback_factor
        self.max_clock_skew = config.max_clock_skew
        self.signing_keys = config.signing_keys
        self.policy = QuotaPolicy.of(config)
        self.refusals = RefusalPolicy.of(config, self.topic)
        # The last stop's topic set with the record it came from: a lookup is one hash, the set is built once.
        self._scope_of: tuple[ThrottleDecision | None, StopScope | None] = (None, None)
        self._resets = ResetTracker()
        self._windows = QuotaWindows()
        self._stop_clock = StopClock(dt.timedelta(seconds=self.policy.stop.max_mute_seconds))
        self._clock = clock
        self._poll_seconds = poll_seconds
        raw = dict(consumer_settings if consumer_settings is not None else config.output_settings)
        where = OUTPUT_SETTINGS if consumer_settings is not None or config.separate_output else ADMIN_SETTINGS
        self._refusal = RefusalWatch(raw, where, log)  # output settings default to the admin ones
        settings, parsed = to_librdkafka(raw)
        for key in parsed.ignored:
            log.warning("%s is not used by the reader's consumer; ignored", key)
        self._consumer_conf: dict[str, Any] = {
            **settings,
            "error_cb": self._refusal,
            "group.id": "quota-pipeline-reader",  # librdkafka requires one; never joined (assign, no commits)
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
        }
        self._factory = consumer_factory
        self._lock = threading.Lock()
        self._held: dict[str, ThrottleDecision] = {}
        self._answers: dict[str, float] = {}
        self._callbacks: list[ChangeCallback] = []
        self._started_at = clock.now()
        self._assigned = threading.Event()
        self._caught_up = threading.Event()
        self.stats = ReaderStats()
        self._refusal_lines = LogLimiter(REFUSAL_LOG_INTERVAL)
        self._skip_lines = LogLimiter(REFUSAL_LOG_INTERVAL)
        self._capped: set[str] = set()  # clusters whose held valid_until was cut short (said once)
        self._newest_read: dict[str, dt.datetime] = {}  # per cluster: the newest observed_at read from the topic

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> "Reader":
        self._started_at = self._clock.now()
        return super().start()

    def wait_assigned(self, timeout: float) -> bool:
        """True once the topic's partitions are assigned (the topic exists)."""
        return self._assigned.wait(timeout)

    def wait_caught_up(self, timeout: float) -> bool:
        """True once the reader has read everything the topic held when it was assigned (a poll came back
        empty): its answers then reflect the latest published decisions. False at the timeout, or as soon as
        the cluster refuses the reader (see refusal())."""
        return self._refusal.wait_for(self._caught_up, timeout)

    def refusal(self) -> str | None:
        """Why the cluster refuses this reader (login or certificate), as one line; it keeps retrying."""
        return self._refusal.message

    # ---- answers --------------------------------------------------------------------------------

    def on_change(self, callback: ChangeCallback) -> None:
        """callback(cluster, old_factor, new_factor), from the reader's thread, whenever an answer changes
        (a new record or an expiry); the equivalent of the callback's quotaResetRequired."""
        with self._lock:
            self._callbacks.append(callback)

    def decision(self, cluster: str) -> ThrottleDecision | None:
        with self._lock:
            return self._held.get(cluster)

    def clusters(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def answer(self, cluster: str | None = None) -> Answer:
        cluster = self._cluster(cluster)
        now = self._clock.now()
        with self._lock:
            held = self._held.get(cluster)
        return self._answer(held, now)

    def current_factor(self, cluster: str | None = None) -> float:
        """The factor a broker of `cluster` applies now: the held decision while valid, else the fallback."""
        return self.answer(cluster).factor

    def quota_limit(self, quota_type: QuotaType | str, principal: str | None, client_id: str | None = None) -> float:
        """Strimzi's StaticQuotaCallback.quotaLimit: produce x factor, and at a stop each client's own limit derived
        from quota.pipeline.throttle.max.mute (never above the static quota); fetch and request unscaled (floored at
        1.0); an excluded principal is unlimited (a client id exempts nobody). `principal` is the principal's name
        (KafkaPrincipal.getName()); a "User:" prefix is accepted. Kafka asks with the tags of
        quota_metric_tags: the same answer."""
        factor = self.current_factor()
        tags = self.policy.metric_tags(quota_type, principal, client_id, factor, 0)
        return self.policy.tagged_limit(quota_type, tags, factor, self._stop_age(factor))

    def stop_scope(self, cluster: str | None = None) -> StopScope | None:
        """What the stop in force on `cluster` refuses (write_refusal.RefusalPolicy), None when no write is refused."""
        answer = self.answer(cluster)
        decision = answer.decision if answer.basis == "record" else None
        seen, scope = self._scope_of
        if answer.factor == 0.0 and decision is not None and seen is decision:
            return scope
        scope = self.refusals.in_force(answer.factor, answer.basis, getattr(decision, "stop", None))
        if decision is not None:
            self._scope_of = (decision, scope)
        return scope

    def refuses(self, topic: str, principal: str | None = None, cluster: str | None = None) -> bool:
        """What the broker's StopAuthorizer answers for a write of `principal` ("User:name" or a name; None: no
        principal) to `topic` now: True when the stop in force refuses it. The client id never matters."""
        return self.refusals.refuses(self.stop_scope(cluster), topic, principal)

    def quota_metric_tags(self, quota_type: QuotaType | str, principal: str | None,
                          client_id: str | None = None) -> dict[str, str]:
        """The callback's quotaMetricTags: which quota sensor (window) Kafka charges the client's bytes on; a new
        produce window after each cut of the produce limit (quota.QuotaWindows)."""
        factor = self.current_factor()
        window = 0
        if QuotaType.of(quota_type) is QuotaType.PRODUCE:
            self._stop_age(factor)
            # Only shared limits move the shared window: a stop's clients are on their own sensors.
            window = 0 if self.policy.at_stop_limit(factor) else self._windows.epoch(self.policy.shared_limit(factor))
        return self.policy.metric_tags(quota_type, principal, client_id, factor, window)

    def _stop_age(self, factor: float) -> float:
        """How long the current stop has lasted (the clock of the stop's lengthening mutes)."""
        return self._stop_clock.age(self._clock.now(), self.policy.at_stop_limit(factor))

    def reset_required(self, quota_type: QuotaType | str = QuotaType.PRODUCE) -> bool:
        """Kafka's quotaResetRequired for this reader's cluster: True once at first, then once after each change
        of the factor answered (PRODUCE); fetch and request are never scaled, so True only at first."""
        qt = QuotaType.of(quota_type)
        if qt is not QuotaType.PRODUCE:
            return self._resets.reset_required(qt, 1.0)
        factor = self.current_factor()
        age = self._stop_age(factor)
        if self.policy.at_stop_limit(factor):  # at a stop the limit also changes as its mute lengthens
            return self._resets.reset_required(qt, (factor, self.policy.stop_limit(age)))
        return self._resets.reset_required(qt, factor)

    def refresh(self) -> None:
        """Re-evaluate every answer now and call the change callbacks (the reader's thread does this
        after every poll; call it yourself after moving an injected clock)."""
        now = self._clock.now()
        with self._lock:
            clusters = set(self._held) | set(self._answers) | ({self.cluster} if self.cluster else set())
            changes = []
            unknown = self._answer(None, now).factor  # what a cluster answered before its first record
            for cluster in sorted(clusters):
                factor = self._answer(self._held.get(cluster), now).factor
                old = self._answers.get(cluster, unknown)
                self._answers[cluster] = factor
                if old != factor:
                    changes.append((cluster, old, factor))
            callbacks = list(self._callbacks)
        for cluster, old, new in changes:
            log.info("throttle factor of %s: %s -> %s", cluster, old, new)
            for callback in callbacks:
                try:
                    callback(cluster, old, new)
                except Exception:  # a broken callback must not stop the reader
                    log.exception("on_change callback failed")

    # ---- records --------------------------------------------------------------------------------

    def apply_record(self, key: bytes | None, value: bytes | None, where: str = "",
                     headers: list[tuple[str, Any]] | None = None) -> bool:
        """Take one topic record (`headers` as confluent-kafka gives them); False when it was skipped, refused or
        ignored. Never raises on bad input."""
        cluster_key = key.decode("utf-8", "replace") if key is not None else None
        if value is None:
            # A tombstone has no date, and anyone who can write the topic can write one: it is read as absence, so
            # the decision in force stays until its own valid_until and a tombstone never shortens a stop.
            if cluster_key is not None:
                with self._lock:
                    self.stats.tombstones += 1
            return False
        try:
            decision = parse_decision(value)
        except (ValueError, RecursionError) as exc:  # RecordError, JSONDecodeError, UnicodeDecodeError; deep nesting
            with self._lock:
                self.stats.skipped += 1
                total, count = self.stats.skipped, self._skip_lines.admit(self._clock.now())
            if count is not None:
                # parse_decision's reasons quote and cut the record's own text; the rest name positions and types.
                reason = str(exc) if len(str(exc)) <= 300 else str(exc)[:300] + "..."
                log.warning("skipped a record%s (key %s): %s (%d skipped so far%s)", where, printable(cluster_key),
                            reason, total, unlogged(count))
            return False
        cluster = cluster_key or decision.cluster_id
        now = self._clock.now()
        why = signature_refusal(self.signing_keys, key, value, signature_of(headers)) \
            or refusal(decision, now, self.max_clock_skew)
        if why is not None:
            self._refuse(Refusal(cluster_key, where, why, now))
            return False  # never replaces the decision in force
        if self.cluster and cluster != self.cluster:
            return False  # kept only for the cluster served: a topic of many clusters costs nothing more (as Java)
        why = replay_refusal(decision, self._newest_read.get(cluster))
        if why is not None:
            self._refuse(Refusal(cluster_key, where, why, now))
            return False
        self._newest_read[cluster] = decision.observed_at
        with self._lock:
            held = self._held.get(cluster)
            if held is not None and decision.observed_at < held.observed_at:
                self.stats.older += 1  # a late or replayed record must not undo a newer decision
                return False
            self._held[cluster] = decision
            self.stats.records += 1
        self._note_cap(cluster, decision, where)
        return True

    def _note_cap(self, cluster: str, decision: ThrottleDecision, where: str) -> None:
        """Say once per cluster (until a record within the limit arrives) that a valid_until is honoured for less."""
        until = honoured_until(decision, self.validity, self.max_clock_skew)
        capped = until is not None and until != decision.valid_until
        if capped and cluster not in self._capped:
            log.warning("the decision%s has valid_until %s, beyond observed_at %s + the validity %s + the skew "
                        "allowance %s: it is honoured until %s (give the pipeline and the readers the same validity)",
                        where, model.format_time(decision.valid_until), model.format_time(decision.observed_at),
                        self.validity, self.max_clock_skew, model.format_time(until))
        (self._capped.add if capped else self._capped.discard)(cluster)

    def _refuse(self, refused: Refusal) -> None:
        """Count a refusal and log it: the first at once, then at most one line per REFUSAL_LOG_INTERVAL."""
        with self._lock:
            self.stats.refused += 1
            self.stats.last_refusal = refused
            total, count = self.stats.refused, self._refusal_lines.admit(refused.at)
        if count is not None:
            log.warning("refused a decision record%s (key %s): %s; the decision in force is kept (%d refused so far%s)",
                        refused.where, printable(refused.key), refused.reason, total, unlogged(count))

    # ---- internals ------------------------------------------------------------------------------

    def _cluster(self, cluster: str | None) -> str:
        if cluster and self.cluster and cluster != self.cluster:
            raise ValueError(f"this reader serves cluster {self.cluster} only (the records of others are not kept): "
                             f"make a Reader(cluster={cluster!r}) for it")
        cluster = cluster or self.cluster
        if not cluster:
            raise ValueError("no cluster given: pass current_factor(cluster) or set quota.pipeline.cluster.name "
                             "(or Reader(cluster=...)) to the key the pipeline publishes for this cluster")
        return cluster

    def _answer(self, held: ThrottleDecision | None, now: dt.datetime) -> Answer:
        if held is None:
            # Like Strimzi's initial factor and decide's initial decision: 1.0 from start, for one validity.
            if now > self._started_at + self.validity:
                return Answer(self.fallback, "fallback", "no decision within the validity since the reader started")
            return Answer(1.0, "initial", "no decision yet")
        if held.source is DecisionSource.FALLBACK or held.valid_until is None:
            return Answer(self.fallback, "fallback", "the publisher itself has no valid decision", held)
        until = honoured_until(held, self.validity, self.max_clock_skew)
        assert until is not None
        if now > until:
            beyond = "" if until == held.valid_until else (
                f" (its valid_until {model.format_time(held.valid_until)} is beyond observed_at + validity + skew)")
            return Answer(self.fallback, "fallback",
                          f"the latest decision expired at {model.format_time(until)}{beyond}", held)
        return Answer(held.throttle_factor, "record", "valid decision", held)

    def _new_consumer(self) -> Any:
        if self._factory is not None:
            return self._factory(dict(self._consumer_conf))
        from confluent_kafka import Consumer
        return Consumer(dict(self._consumer_conf), logger=log)

    def _run(self) -> None:
        consumer = None
        try:
            consumer = self._new_consumer()
            while not self._stop.is_set() and not self._assign(consumer):
                consumer.poll(0)  # serves error_cb: a refused login says so
                self.refresh()
                self._stop.wait(METADATA_RETRY_SECONDS)
            while not self._stop.is_set():
                batch = consumer.consume(num_messages=500, timeout=self._poll_seconds)
                if not batch:
                    self._caught_up.set()
                for msg in batch:
                    if msg.error():
                        if not msg.error().code() == _partition_eof():
                            log.warning("reader: %s", msg.error())
                        continue
                    self.apply_record(msg.key(), msg.value(),
                                      f" at {msg.topic()}/{msg.partition()}@{msg.offset()}", msg.headers())
                self.refresh()
        except Exception:  # the thread must log why it ended; answers keep falling back by time meanwhile
            log.exception("the reader stopped following %s", self.topic)
        finally:
            close_quietly(consumer)

    def _assign(self, consumer: Any) -> bool:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        try:
            metadata = consumer.list_topics(self.topic, timeout=5)
        except Exception as exc:
            log.warning("reader: cannot read metadata of %s (%s); retrying", self.topic, exc)
            return False
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            log.info("reader: topic %s not available yet (%s); retrying", self.topic,
                     None if topic is None else topic.error)
            return False
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(topic.partitions)])
        self._assigned.set()
        return True


def _partition_eof() -> int:
    from confluent_kafka import KafkaError
    return KafkaError._PARTITION_EOF
