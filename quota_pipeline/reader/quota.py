"""What a broker's quota callback answers for a throttle factor: Strimzi's quota rule, windows, quotaResetRequired.

The Java callback (QuotaPolicy, QuotaWindows, ResetTracker; the stop's limit: core/stop.py, StopLimit) applies the same
rules, with the pipeline's exemptions; tests/vectors/broker_quota_vectors.json holds both to them.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from enum import Enum

from quota_pipeline.core.config import Config
from quota_pipeline.core.exemption import USER_PREFIX
from quota_pipeline.core.exemption import principal_name as _name
from quota_pipeline.core.stop import StopLimit

UNLIMITED = sys.float_info.max  # Strimzi's Quota.upperBound(Double.MAX_VALUE)
MIN_QUOTA = 1.0  # Strimzi: "returning zero would cause a divide by zero in Kafka"
QUOTA_TYPE_TAG = "quota.type"
EXCLUDED_PRINCIPAL_TAG = "excluded-principal-quota-key"  # Strimzi's tag
WINDOW_TAG = "quota.window"  # QuotaWindows' epoch: a new value is a new sensor, hence an empty window
# A client's own stop sensor carries no epoch: it only ever holds bytes charged at a stop limit, so every stop reuses
# it and the cut applies to the bytes the client sent in the last stops.
STOP_WINDOW = "stop"
USER_TAG, CLIENT_ID_TAG = "user", "client-id"  # Kafka's own tag names


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
    """Produce x factor, and at a stop each client's own limit derived from the longest mute (`stop`); fetch and
    request unscaled, floored at 1.0; excluded principals unlimited for every type. No client is exempt by its
    client id: a client chooses its own."""

    produce: float | None = None
    fetch: float | None = None
    request: float | None = None
    excluded_names: frozenset[str] = frozenset()  # principal names, "User:" removed (Strimzi compares getName())
    stop: StopLimit = StopLimit()

    @classmethod
    def of(cls, config: Config) -> "QuotaPolicy":
        return cls(config.produce, config.fetch, config.request,
                   frozenset(p[len(USER_PREFIX):] for p in config.excluded_principals), config.stop_limit())

    def exempt(self, principal: str | None, client_id: str | None = None) -> bool:
        """`principal` is a name (KafkaPrincipal.getName()) or "User:name"; the client id exempts nobody."""
        name = _name(principal)
        return name is not None and name in self.excluded_names

    def limit(self, quota_type: QuotaType | str, principal: str | None, client_id: str | None,
              factor: float, stop_age: float = 0.0) -> float:
        qt = QuotaType.of(quota_type)
        if self.exempt(principal, client_id):
            return UNLIMITED
        if qt is QuotaType.PRODUCE:
            return self.produce_limit(factor, stop_age)
        return max(MIN_QUOTA, self.static(qt))

    def tagged_limit(self, quota_type: QuotaType | str, tags: dict[str, str], factor: float,
                     stop_age: float) -> float:
        """Kafka's quotaLimit(type, tags): a stop sensor has the stop limit, a shared window the shared one."""
        qt = QuotaType.of(quota_type)
        if tags.get(EXCLUDED_PRINCIPAL_TAG) == "true":
            return UNLIMITED
        if qt is not QuotaType.PRODUCE:
            return max(MIN_QUOTA, self.static(qt))
        return self.stop_limit(stop_age) if tags.get(WINDOW_TAG) == STOP_WINDOW else self.shared_limit(factor)

    def static(self, quota_type: QuotaType) -> float:
        value = {QuotaType.PRODUCE: self.produce, QuotaType.FETCH: self.fetch, QuotaType.REQUEST: self.request}[
            quota_type]
        return UNLIMITED if value is None else value

    def produce_limit(self, factor: float, stop_age: float = 0.0) -> float:
        """The produce limit a client is charged at now: the stop limit at a stop, else the shared one."""
        return self.stop_limit(stop_age) if self.at_stop_limit(factor) else self.shared_limit(factor)

    def shared_limit(self, factor: float) -> float:
        """The static produce quota x factor shared by the clients of a window, never below the limit a stop starts
        with, which never raises the static quota; at least MIN_QUOTA, as Kafka divides by it."""
        quota = self.static(QuotaType.PRODUCE)
        return max(MIN_QUOTA, min(self.stop.enter_limit(), quota), quota * factor)

    def stop_limit(self, stop_age: float) -> float:
        """Each client's own limit at a stop of that age, never above the static quota; at least MIN_QUOTA."""
        return max(MIN_QUOTA, min(self.stop.limit(stop_age), self.static(QuotaType.PRODUCE)))

    def at_stop_limit(self, factor: float) -> bool:
        """Each producer is throttled to its own stop limit (a quota, not the refused writes of write_refusal): the
        factor leaves the shared limit at or below what one client gets when a stop starts (and that is below the
        static quota)."""
        quota, enter = self.static(QuotaType.PRODUCE), self.stop.enter_limit()
        return quota * factor <= enter < quota

    def metric_tags(self, quota_type: QuotaType | str, principal: str | None, client_id: str | None, factor: float,
                    window: int) -> dict[str, str]:
        """Kafka's quotaMetricTags: the tags that name the quota sensor a client is charged on. Produce clients share
        the window of epoch `window` (QuotaWindows); at a stop each (user, client id) is charged on its own stop
        sensor, so one producer's bytes never lengthen another's mute."""
        qt = QuotaType.of(quota_type)
        tags = {QUOTA_TYPE_TAG: qt.value}
        name = _name(principal)
        if name is not None and name in self.excluded_names:
            tags[EXCLUDED_PRINCIPAL_TAG] = "true"
        elif qt is QuotaType.PRODUCE:
            if self.at_stop_limit(factor):
                tags.update({WINDOW_TAG: STOP_WINDOW, USER_TAG: name or "", CLIENT_ID_TAG: client_id or ""})
            else:
                tags[WINDOW_TAG] = str(window)
        return tags


class QuotaWindows:
    """Moves produce clients onto a new quota window after each cut of the produce limit.

    Kafka charges a throttle against the bytes the client's quota sensor still holds (up to quota.window.num x
    quota.window.size.seconds, 11 s by default): a cut from P to L on the same sensor is answered with a throttle of
    about (P/L - 1) x 11 s, days at Strimzi's 1 byte/s, and the client stays muted long after the release. A sensor is
    named by its metric tags, so a new epoch in the tags gives every client a new, empty window, charged only for what
    it sends after the cut. Raising the limit needs no new window. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._limit = 0.0

    def epoch(self, produce_limit: float) -> int:
        """The epoch for a produce limit answered now: the current one, or a new one when the limit went down."""
        with self._lock:
            if self._epoch is None:
                self._epoch = 0
            elif produce_limit < self._limit:
                self._epoch += 1
            self._limit = produce_limit
            return self._epoch


class ResetTracker:
    """Kafka's quotaResetRequired: true once per quota type at first (as Strimzi), then true once after each change
    of what is answered for that type (for produce: the factor, or the stop limit at a stop). Thread-safe: exactly one
    caller sees each change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acknowledged: dict[QuotaType, object] = {}

    def reset_required(self, quota_type: QuotaType | str, answered: object) -> bool:
        qt = QuotaType.of(quota_type)
        with self._lock:
            if qt in self._acknowledged and self._acknowledged[qt] == answered:
                return False
            self._acknowledged[qt] = answered
            return True
