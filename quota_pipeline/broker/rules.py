"""The pure rules a broker applies: which records it reads (and refuses), Strimzi's quota rule with the pipeline's
exemptions, Kafka's quotaResetRequired, and which writes a stop refuses (its exemptions: core/exemption.py).

The Java callback and authorizer (broker-callback/: DecisionRecord, QuotaPolicy, StopLimit, ResetTracker,
RefusalPolicy) apply the same rules; tests/vectors/broker_quota_vectors.json holds both to them.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
import threading
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import isodate

from quota_pipeline.core import signing
from quota_pipeline.core.display import escape
from quota_pipeline.core.config import MAX_CLOCK_SKEW, Config
from quota_pipeline.core.exemption import USER_PREFIX, StopExemption
from quota_pipeline.core.exemption import principal_name as _name
from quota_pipeline.core.signing import SigningKey
from quota_pipeline.core.model import DecisionSource, RecordError, Status, WorstVolume, format_time
from quota_pipeline.core.record import READABLE_VERSIONS, ThrottleDecision
from quota_pipeline.core.record_time import parse_record_time
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


STATUSES = frozenset(s.value for s in Status)
SOURCES = frozenset(s.value for s in DecisionSource)
COUNTS = ("active_brokers", "active_log_dirs", "violations")
SHOWN_TIME_CHARS = 40  # how much of a bad timestamp a log line shows: a timestamp is about 30 characters
_WORST_FIELDS = frozenset(f.name for f in dataclasses.fields(WorstVolume))


def parse_decision(value: bytes) -> ThrottleDecision:
    """A record value as every reader reads it (the Java callback's DecisionRecord takes exactly the same records);
    raises ValueError.

    The fields that decide, and the ones every record carries, are checked by their JSON type: schema_version (the
    integer 1 or 2), cluster_id (a string), observed_at and decided_at (timestamps), throttle_factor (a number from 0
    to 1), source, valid_until (a timestamp, or absent or null), status (one of the poll statuses) and
    active_brokers, active_log_dirs and violations (whole numbers, not negative). The other fields are diagnostics:
    one that cannot be read reads as none, as the Java callback, which reads none of them, takes the record too.
    Fields no version knows are ignored. The value is read by record_json, every timestamp by
    core.record_time.parse_record_time (RFC 3339)."""
    raw = record_json(value)
    if not isinstance(raw, dict):
        raise RecordError("the value is not a JSON object")
    times = {}
    version = raw.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:  # type(): True == 1 in Python
        raise RecordError(f"unknown schema_version {_describe(version)}")
    if not isinstance(raw.get("cluster_id"), str):
        raise RecordError(f"cluster_id must be a string, got {_describe(raw.get('cluster_id'))}")
    times["observed_at"] = _time(raw, "observed_at")
    factor = raw.get("throttle_factor")
    if type(factor) not in (int, float) or not 0.0 <= factor <= 1.0:
        raise RecordError(f"throttle_factor must be a number from 0 to 1, got {_describe(factor)}")
    if not isinstance(raw.get("source"), str) or raw["source"] not in SOURCES:
        raise RecordError(f"source must be OBSERVATION, RETAINED or FALLBACK, got {_describe(raw.get('source'))}")
    if raw.get("valid_until") is not None:
        times["valid_until"] = _time(raw, "valid_until")
    times["decided_at"] = _time(raw, "decided_at")
    if not isinstance(raw.get("status"), str) or raw["status"] not in STATUSES:
        raise RecordError(f"status must be one of {', '.join(sorted(STATUSES))}, got {_describe(raw.get('status'))}")
    for name in COUNTS:
        count = raw.get(name)
        if type(count) is not int or count < 0:
            raise RecordError(f"{name} must be a whole number, not negative, got {_describe(count)}")
    return ThrottleDecision.from_json({**_diagnostics_read_leniently(raw), **times})


def record_json(value: bytes) -> Any:
    """A record value as every reader decodes it (the Java callback's DecisionRecord too): one JSON text in UTF-8,
    decoded strictly. json.loads would also take UTF-16 and UTF-32 and skip a byte order mark: those are refused, so
    that a record reads the same everywhere. Raises ValueError."""
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(f"the value is not UTF-8 (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise RecordError("the value starts with a byte order mark: a record is UTF-8 without one")
    return json.loads(text)


def _time(raw: dict[str, Any], name: str) -> dt.datetime:
    """raw[name] read as a record timestamp; RecordError unless it is one (outside text quoted and cut)."""
    value = raw.get(name)
    if not isinstance(value, str):
        raise RecordError(f"{name} must be an RFC 3339 timestamp, got {_describe(value)}")
    try:
        return parse_record_time(value)
    except ValueError as exc:
        raise RecordError(f"{name} is not an RFC 3339 timestamp ({exc}): {printable(value, SHOWN_TIME_CHARS)}") \
            from None


def _describe(value: Any) -> str:
    """A field's value for a log line, escaped and cut short: the record is anyone's text (a string is quoted;
    JSON's own text escapes every other value's control and non-ASCII characters)."""
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return printable(value, 80)
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _diagnostics_read_leniently(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` with each diagnostic field the record cannot give replaced by none: a reader acts on the deciding fields
    and must not refuse a record the Java callback takes (closest_volumes, predictive and stop are read leniently by
    core.record already)."""
    out = dict(raw)
    missing = raw.get("missing_brokers")
    if not (isinstance(missing, list) and all(type(b) is int for b in missing)):
        out["missing_brokers"] = None
    if not isinstance(raw.get("limit"), dict):
        out["limit"] = None
    worst = raw.get("worst_volume")
    if not (isinstance(worst, dict) and set(worst) == _WORST_FIELDS):
        out["worst_volume"] = None
    if type(raw.get("min_available_ratio")) not in (int, float):
        out["min_available_ratio"] = None
    since = raw.get("throttled_since")
    try:
        out["throttled_since"] = None if since is None else parse_record_time(since)
    except ValueError:
        out["throttled_since"] = None
    return out


def refusal(decision: ThrottleDecision, now: dt.datetime, skew: dt.timedelta) -> str | None:
    """Why a reader whose clock reads `now` must not take `decision`, or None when it may: its observed_at or
    decided_at is further ahead of that clock than `skew` (quota.pipeline.reader.max.clock.skew). Only the pipeline
    may change the factor: a record from the future would otherwise outrank every genuine one, since the latest
    observed_at wins. The Java callback's DecisionRecord.refusal says the same."""
    latest = now + skew
    for field, at in (("observed_at", decision.observed_at), ("decided_at", decision.decided_at)):
        if at is not None and at > latest:
            ahead = int((at - now).total_seconds())
            return (f"{field} {format_time(at)} is {ahead} s ahead of this reader's clock ({format_time(now)}); "
                    f"{MAX_CLOCK_SKEW} allows {_iso(skew)}")
    return None


def signature_refusal(keys: tuple[SigningKey, ...], key: bytes | None, value: bytes,
                      signature: bytes | None) -> str | None:
    """Why a reader holding `keys` (quota.pipeline.signing.keys) must not take a record, or None when it may: no key
    is configured, or the record's signature header names one of them and its HMAC matches (core/signing.py). The
    Java callback's DecisionSignature.refusal says the same."""
    if not keys:
        return None
    if signature is None:
        return f"it carries no {signing.HEADER} header, and {signing.KEYS_PROPERTY} requires one"
    parts = signing.split(signature)
    if parts is None:
        return f"its {signing.HEADER} header is not <key id>:<64 hex digits>"
    key_id, digest = parts
    for k in keys:
        if k.key_id == key_id:
            if signing.valid(k, key, value, digest):
                return None
            return f"its signature does not match key {printable(key_id)}: not written by the pipeline, or altered"
    return (f"it is signed with key id {printable(key_id)}, which this reader does not hold (it holds "
            f"{', '.join(k.key_id for k in keys)})")


@dataclass
class LogLimiter:
    """When a repeated warning is logged: the first at once, then at most one line per `interval`, saying how many
    were not logged meanwhile (the Java callback's LogLimiter). Anyone who can write the decision topic can make a
    reader warn once per record, so no such warning may reach the log once per record. Not thread-safe: callers
    hold their own lock."""

    interval: dt.timedelta
    _last: dt.datetime | None = None
    _not_logged: int = 0

    def admit(self, now: dt.datetime) -> int | None:
        """None when the warning at `now` is not logged (counted); else how many were not logged since the last
        line. A clock that went back logs at once."""
        if self._last is not None and self._last <= now < self._last + self.interval:
            self._not_logged += 1
            return None
        unlogged, self._not_logged, self._last = self._not_logged, 0, now
        return unlogged


def unlogged(count: int) -> str:
    """", n of them not logged" for a count from LogLimiter.admit, or nothing."""
    return f", {count} of them not logged" if count else ""


def replay_refusal(decision: ThrottleDecision, newest_read: dt.datetime | None) -> str | None:
    """Why a record read from the topic after one of the same cluster observed later must not be taken, or None: the
    pipeline writes a cluster's records in order, so it was written again (a replay, signed or not). Only a reader's
    own order counts: the Java callback restarting from its stored decision reads older records after it, and
    ignores those as older. DecisionHolder says the same."""
    if newest_read is None or decision.observed_at >= newest_read:
        return None
    return (f"observed_at {format_time(decision.observed_at)} is older than that of a record read before it "
            f"({format_time(newest_read)}): a record written again, since the pipeline writes a cluster's records "
            "in order")


class Dated(Protocol):
    """What honoured_until reads: a ThrottleDecision, or the dashboard's view of one."""

    @property
    def observed_at(self) -> dt.datetime: ...

    @property
    def valid_until(self) -> dt.datetime | None: ...


def honoured_until(decision: Dated, validity: dt.timedelta, skew: dt.timedelta) -> dt.datetime | None:
    """Until when a held record is honoured: its valid_until, but never beyond observed_at + the reader's own validity
    + skew, so that a record cannot outlive a stopped pipeline by more than a genuine one would. None without
    valid_until."""
    if decision.valid_until is None:
        return None
    try:
        limit = decision.observed_at + validity + skew
    except OverflowError:  # observed_at near year 9999: only a clock that far on takes such a record
        return decision.valid_until
    return min(decision.valid_until, limit)


def printable(text: str | None, limit: int = 120) -> str:
    """Outside text (a record key: anyone may write one) as one log line may show it: quoted, `"` and `\\` after a
    backslash, every other character by core.display.escape, cut after `limit` characters (the callback's
    Printable.quote)."""
    if text is None:
        return "none"
    out = []
    for ch in text[:limit]:
        out.append("\\" + ch if ch in '"\\' else escape(ch))
    more = f'... ({len(text) - limit} more characters)' if len(text) > limit else ""
    return '"' + "".join(out) + '"' + more


def _iso(duration: dt.timedelta) -> str:
    return isodate.duration_isoformat(duration)


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
        return self.stop_limit(stop_age) if self.stopped(factor) else self.shared_limit(factor)

    def shared_limit(self, factor: float) -> float:
        """The static produce quota x factor shared by the clients of a window, never below the limit a stop starts
        with, which never raises the static quota; at least MIN_QUOTA, as Kafka divides by it."""
        quota = self.static(QuotaType.PRODUCE)
        return max(MIN_QUOTA, min(self.stop.enter_limit(), quota), quota * factor)

    def stop_limit(self, stop_age: float) -> float:
        """Each client's own limit at a stop of that age, never above the static quota; at least MIN_QUOTA."""
        return max(MIN_QUOTA, min(self.stop.limit(stop_age), self.static(QuotaType.PRODUCE)))

    def stopped(self, factor: float) -> bool:
        """Production is stopped: the factor leaves the shared limit at or below what one client gets when a stop
        starts (and that is below the static quota)."""
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
            if self.stopped(factor):
                tags.update({WINDOW_TAG: STOP_WINDOW, USER_TAG: name or "", CLIENT_ID_TAG: client_id or ""})
            else:
                tags[WINDOW_TAG] = str(window)
        return tags


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
