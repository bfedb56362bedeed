"""Which writes a stop refuses: its scope (some topics or the whole cluster) and its exemptions (core/exemption.py).

The Java StopAuthorizer's RefusalPolicy and StopScope say the same; tests/vectors/broker_quota_vectors.json holds both
to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quota_pipeline.core.config import Config
from quota_pipeline.core.exemption import StopExemption

SCOPE_TOPICS, SCOPE_CLUSTER = "topics", "cluster"


@dataclass(frozen=True)
class StopScope:
    """What a stop in force refuses: the writes to `topics`, or (None) to every topic of the cluster."""

    topics: frozenset[str] | None = None

    def covers(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics


CLUSTER_SCOPE = StopScope()


@dataclass(frozen=True)
class RefusalPolicy:
    """Which writes a stop refuses (the Java StopAuthorizer's RefusalPolicy says the same).

    At factor 0 a write to a topic is refused unless the exemption lets it through (core/exemption.py: Kafka's
    internal topics, the decision topic on the cluster that holds it, the excluded principals). Within those, the
    stop's scope decides: the whole cluster when the reader says so (quota.pipeline.stop.scope=cluster), when the
    factor is not a published decision (the fallback, the initial period) or when the record names no well-formed
    topic list; else the topics it lists. No exemption goes by client id: a client chooses its own."""

    exemption: StopExemption = StopExemption()
    cluster_wide: bool = False

    @classmethod
    def of(cls, config: Config, topic: str | None = None) -> "RefusalPolicy":
        """The policy on the cluster `config` observes; `topic` overrides the decision topic's name."""
        return cls(StopExemption.of(config, topic), config.stop_scope == SCOPE_CLUSTER)

    def in_force(self, factor: float, basis: str, stop: Any) -> StopScope | None:
        """The stop in force, None when writes are not stopped. `basis` is "record", "fallback" or "initial";
        `stop` the held record's (a core.model.Stop, which core.record reads leniently: a malformed one is the whole
        cluster)."""
        if factor != 0.0:
            return None
        if self.cluster_wide or basis != "record" or getattr(stop, "scope", None) != SCOPE_TOPICS:
            return CLUSTER_SCOPE
        return StopScope(frozenset(stop.topics))

    def refuses(self, scope: StopScope | None, topic: str, principal: str | None) -> bool:
        """Whether the stop `scope` (None: none) refuses `principal`'s write to `topic`; `principal` is a name or
        "User:name"."""
        return scope is not None and not self.exemption.exempt(principal, topic) and scope.covers(topic)
