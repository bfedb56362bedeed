"""The pure rules a broker applies: which records it reads, Strimzi's quota rule with the pipeline's exemptions, and
Kafka's quotaResetRequired.

The Java callback (broker-callback/: DecisionRecord, QuotaPolicy, ResetTracker) applies the same rules;
tests/vectors/broker_quota_vectors.json holds both to them.
"""
from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from enum import Enum

from quota_pipeline.core.config import Config
from quota_pipeline.core.model import RecordError
from quota_pipeline.core.record import READABLE_VERSIONS, ThrottleDecision

UNLIMITED = sys.float_info.max  # Strimzi's Quota.upperBound(Double.MAX_VALUE)
MIN_QUOTA = 1.0  # Strimzi: "returning zero would cause a divide by zero in Kafka"
USER_PREFIX = "User:"


def parse_decision(value: bytes) -> ThrottleDecision:
    """A record value as brokers read it (the Java callback's DecisionRecord accepts the same); raises ValueError.

    schema_version must be the JSON integer 1 or 2 and throttle_factor a JSON number from 0 to 1; fields no version
    knows are ignored."""
    raw = json.loads(value)
    if not isinstance(raw, dict):
        raise RecordError("the value is not a JSON object")
    version = raw.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:  # type(): True == 1 in Python
        raise RecordError(f"unknown schema_version {version!r}")
    factor = raw.get("throttle_factor")
    if type(factor) not in (int, float) or not 0.0 <= factor <= 1.0:
        raise RecordError(f"throttle_factor must be a number from 0 to 1, got {factor!r}")
    return ThrottleDecision.from_json(raw)


class QuotaType(str, Enum):
    """Kafka's ClientQuotaType."""

    PRODUCE = "PRODUCE"
    FETCH = "FETCH"
    REQUEST = "REQUEST"

    @classmethod
    def of(cls, value: "QuotaType | str") -> "QuotaType":
        return value if isinstance(value, QuotaType) else cls(value.upper())


@dataclass(frozen=True)
class QuotaPolicy:
    """Produce x factor floored at `produce_floor`; fetch and request unscaled, floored at 1.0; exempt clients
    (an excluded principal or an excluded client id) unlimited for every type."""

    produce: float | None = None
    fetch: float | None = None
    request: float | None = None
    excluded_names: frozenset[str] = frozenset()  # principal names, "User:" removed (Strimzi compares getName())
    excluded_client_ids: frozenset[str] = frozenset()
    produce_floor: float = MIN_QUOTA

    @classmethod
    def of(cls, config: Config) -> "QuotaPolicy":
        return cls(config.produce, config.fetch, config.request,
                   frozenset(p[len(USER_PREFIX):] for p in config.excluded_principals),
                   frozenset(config.excluded_client_ids), config.produce_floor)

    def exempt(self, principal: str | None, client_id: str | None) -> bool:
        """`principal` is a name (KafkaPrincipal.getName()) or "User:name"."""
        name = principal[len(USER_PREFIX):] if principal and principal.startswith(USER_PREFIX) else principal
        return (name is not None and name in self.excluded_names) or (
            client_id is not None and client_id in self.excluded_client_ids)

    def limit(self, quota_type: QuotaType | str, principal: str | None, client_id: str | None,
              factor: float) -> float:
        qt = QuotaType.of(quota_type)
        if self.exempt(principal, client_id):
            return UNLIMITED
        static = {QuotaType.PRODUCE: self.produce, QuotaType.FETCH: self.fetch, QuotaType.REQUEST: self.request}[qt]
        quota = UNLIMITED if static is None else static
        if qt is QuotaType.PRODUCE:
            return max(self.produce_floor, quota * factor)
        return max(MIN_QUOTA, quota)


class ResetTracker:
    """Kafka's quotaResetRequired: true once per quota type at first (as Strimzi), then true once after each change
    of the value answered for that type. Thread-safe: exactly one caller sees each change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acknowledged: dict[QuotaType, float] = {}

    def reset_required(self, quota_type: QuotaType | str, answered: float) -> bool:
        qt = QuotaType.of(quota_type)
        with self._lock:
            if qt in self._acknowledged and self._acknowledged[qt] == answered:
                return False
            self._acknowledged[qt] = answered
            return True
