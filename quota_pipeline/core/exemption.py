"""Which (principal, topic) a stop never refuses: the one rule of the reader, `enforce`, `remedy` and the record's stop.

The Java StopAuthorizer's RefusalPolicy says the same; tests/vectors/broker_quota_vectors.json holds both to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from quota_pipeline.core.config import Config
from quota_pipeline.core.properties import DEFAULT_OUTPUT_TOPIC

# Kafka's internal topics, written by the broker on the clients' behalf (consumer offsets, transactions and share
# groups must not fail because a disk filled).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
USER_PREFIX = "User:"


def principal_name(principal: str | None) -> str | None:
    """KafkaPrincipal.getName() of "User:name" (or of a bare name)."""
    return principal[len(USER_PREFIX):] if principal and principal.startswith(USER_PREFIX) else principal


@dataclass(frozen=True)
class StopExemption:
    """What a stop lets through: Kafka's internal topics always; the decision topic only on the cluster that holds it
    (the record that lifts the stop must get through; on any other cluster a topic of that name is anyone's, and
    anyone who may create it would write through every stop); the excluded principals' writes. Never by client id:
    a client chooses its own."""

    decision_topic: str | None = DEFAULT_OUTPUT_TOPIC  # None: the decision topic lives on another cluster
    excluded_names: frozenset[str] = frozenset()  # principal names, "User:" removed (KafkaPrincipal.getName())

    @classmethod
    def of(cls, config: Config, topic: str | None = None) -> "StopExemption":
        """The exemption on the cluster `config` observes; `topic` overrides the decision topic's name."""
        held = (topic or config.output_topic) if config.decision_topic_here else None
        return cls(held, frozenset(p[len(USER_PREFIX):] for p in config.excluded_principals))

    @property
    def held(self) -> frozenset[str]:
        """The decision topic as a set when this cluster holds it, else empty."""
        return frozenset() if self.decision_topic is None else frozenset({self.decision_topic})

    def topic_exempt(self, topic: str) -> bool:
        """No principal's write to `topic` is refused by a stop."""
        return topic in INTERNAL_TOPICS or topic == self.decision_topic

    def principal_exempt(self, principal: str | None) -> bool:
        """`principal` ("User:name" or a name; None: none) is excluded: no write of it is refused."""
        name = principal_name(principal)
        return name is not None and name in self.excluded_names

    def exempt(self, principal: str | None, topic: str) -> bool:
        return self.topic_exempt(topic) or self.principal_exempt(principal)

    def refusable(self, topics: Iterable[str]) -> tuple[str, ...]:
        """The sorted distinct topics among `topics` whose writes a stop refuses (to every principal not excluded):
        what a targeted stop lists."""
        return tuple(sorted(t for t in set(topics) if not self.topic_exempt(t)))
