"""The values every part of the pipeline shares: volumes, snapshots, summaries and decisions."""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable

import isodate

UTC = dt.timezone.utc


class Status(str, Enum):
    SUCCESS = "SUCCESS"
    DESCRIBE_CLUSTER_ERROR = "DESCRIBE_CLUSTER_ERROR"
    DESCRIBE_LOG_DIRS_ERROR = "DESCRIBE_LOG_DIRS_ERROR"
    TIMEOUT = "TIMEOUT"
    UNSUPPORTED_BROKER = "UNSUPPORTED_BROKER"
    ERROR = "ERROR"


class DecisionSource(str, Enum):
    """Why a decision holds: a deciding observation, retained within validity, or the fallback."""

    OBSERVATION = "OBSERVATION"
    RETAINED = "RETAINED"
    FALLBACK = "FALLBACK"


STATUSES = tuple(s.value for s in Status)
SOURCES = tuple(s.value for s in DecisionSource)


class RecordError(ValueError):
    """A journal record that does not follow the snapshot format; the message says which field."""


def parse_time(value: Any) -> dt.datetime:
    """ISO-8601 timestamp to an aware UTC datetime; a time without zone is taken as UTC (as Spark does)."""
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = isodate.parse_datetime(value)
        except (ValueError, isodate.ISO8601Error) as exc:
            raise RecordError(f"observed_at is not an ISO-8601 timestamp: {value!r}") from exc
    else:
        raise RecordError(f"observed_at must be an ISO-8601 string, got {value!r}")
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset that moves it out of datetime's range (found by fuzzing)
        raise RecordError(f"timestamp out of range: {value!r}") from None


def format_time(value: dt.datetime | None) -> str | None:
    """Millisecond ISO-8601 in UTC with a Z, the journal and output format."""
    if value is None:
        return None
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def micros(span: dt.timedelta) -> int:
    """A duration in whole microseconds (Spark's timestamp unit), without float rounding."""
    return span.days * 86_400_000_000 + span.seconds * 1_000_000 + span.microseconds


def epoch_micros(t: dt.datetime) -> int:
    return micros(t - EPOCH)


def from_epoch_micros(us: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=us)



TOP_PARTITIONS = 5  # largest partitions kept per log dir, in the journal and the record


@dataclass(frozen=True)
class PartitionSize:
    """One partition's size on one log dir, as DescribeLogDirs reports it: what is filling a disk."""

    topic: str
    partition: int
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "size_bytes": self.size_bytes}


@dataclass(frozen=True)
class Volume:
    """One log dir of one broker as DescribeLogDirs reported it; error set means offline, no bytes."""

    broker_id: int
    log_dir: str
    total_bytes: int | None
    available_bytes: int | None
    error: str | None = None
    top_partitions: tuple[PartitionSize, ...] = ()
    # The sorted distinct topics with a replica on the dir (future replicas included: a replica moving onto it
    # writes to it): what a stop at this dir must refuse. None: not known (an offline dir, an older journal).
    topics: tuple[str, ...] | None = None

    @property
    def offline(self) -> bool:
        return self.error is not None or self.total_bytes is None or self.available_bytes is None

    @property
    def used_bytes(self) -> int | None:
        return None if self.offline else self.total_bytes - self.available_bytes  # type: ignore[operator]

    @property
    def available_ratio(self) -> float | None:
        if self.offline:
            return None
        return 0.0 if self.total_bytes == 0 else self.available_bytes / self.total_bytes  # type: ignore[operator]

    def to_json(self) -> dict[str, Any]:
        # Written for every log dir of every poll into the journal: each property is worked out once here.
        total, available = self.total_bytes, self.available_bytes
        if self.error is not None or total is None or available is None:
            record: dict[str, Any] = {"broker_id": self.broker_id, "log_dir": self.log_dir, "total_bytes": None,
                                      "available_bytes": None, "used_bytes": None, "available_ratio": None,
                                      "error": self.error}
        else:
            record = {"broker_id": self.broker_id, "log_dir": self.log_dir, "total_bytes": total,
                      "available_bytes": available, "used_bytes": total - available,
                      "available_ratio": 0.0 if total == 0 else available / total, "error": None}
        if self.top_partitions:
            record["top_partitions"] = [p.to_json() for p in self.top_partitions]
        if self.topics is not None:
            record["topics"] = list(self.topics)
        return record


@dataclass(frozen=True)
class VolumeSnapshot:
    """One observation of one cluster: the journal record and the source's unit of work."""

    cluster_id: str
    observed_at: dt.datetime
    status: Status
    brokers: tuple[int, ...] = ()
    fenced_brokers: tuple[int, ...] = ()
    volumes: tuple[Volume, ...] = ()
    message: str | None = None

    @property
    def registered_brokers(self) -> frozenset[int]:
        return frozenset(self.brokers) | frozenset(self.fenced_brokers)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "cluster_id": self.cluster_id,
            "observed_at": format_time(self.observed_at),
            "status": self.status.value,
            "brokers": list(self.brokers),
            "fenced_brokers": list(self.fenced_brokers),
            "volumes": [v.to_json() for v in self.volumes],
        }
        if self.message is not None:
            record["message"] = self.message
        return record


@dataclass(frozen=True)
class WorstVolume:
    """The entry in force that constrains the factor most (lowest factor, then lowest ratio)."""

    broker_id: int
    log_dir: str
    available_bytes: int | None
    available_ratio: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id,
            "log_dir": self.log_dir,
            "available_bytes": self.available_bytes,
            "available_ratio": self.available_ratio,
        }


# closest_volumes' `reason` of an entry without bytes.
OFFLINE, OFFLINE_FILLING = "offline", "offline-filling"


@dataclass(frozen=True)
class ClosestVolume:
    """A log dir in force near the hard limit: its headroom, how fast it fills, when it gets there, and why."""

    broker_id: int
    log_dir: str
    available_bytes: int | None
    total_bytes: int | None
    available_ratio: float | None
    headroom_bytes: float | None  # available minus the hard limit in bytes; None when offline
    fill_rate_bytes_per_second: float | None  # None unless filling
    eta_seconds: float | None  # 0 for a dir that went offline after filling up to the hard limit
    top_partitions: tuple[PartitionSize, ...] = ()
    # Why a dir without bytes violates: "offline" (reported offline, no reading to go by, or policy `violate`) or
    # "offline-filling" (its last readings reached the hard limit by now at their fill rate); None for a reading.
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id, "log_dir": self.log_dir, "available_bytes": self.available_bytes,
            "total_bytes": self.total_bytes, "available_ratio": self.available_ratio,
            "headroom_bytes": self.headroom_bytes, "fill_rate_bytes_per_second": self.fill_rate_bytes_per_second,
            "eta_seconds": self.eta_seconds, "top_partitions": [p.to_json() for p in self.top_partitions],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class PredictiveThrottle:
    """Why the factor is below what the limits alone give: the log dir in force whose predictive factor (its time
    to the hard limit / the horizon) is the least, with that time and the horizon (storage.per.volume.eta.horizon)."""

    broker_id: int
    log_dir: str
    eta_seconds: float
    horizon_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"broker_id": self.broker_id, "log_dir": self.log_dir, "eta_seconds": self.eta_seconds,
                "horizon_seconds": self.horizon_seconds}


# The record's `stop` scopes (Stop.scope).
STOP_TOPICS, STOP_CLUSTER = "topics", "cluster"
# The most bytes the stop's topic list may take as compact JSON (stop_json_bytes); a longer one stops the
# cluster instead. Half of Kafka's default max.message.bytes (1 MiB): the rest of the record is small.
STOP_TOPICS_BUDGET = 512 * 1024


@dataclass(frozen=True)
class Stop:
    """What a factor of 0 stops: the writes to `topics` (those with a replica on a log dir at its hard limit), or,
    with scope cluster, every write."""

    scope: str
    topics: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.scope == STOP_TOPICS:
            return {"scope": STOP_TOPICS, "topics": list(self.topics)}
        return {"scope": STOP_CLUSTER}


CLUSTER_STOP = Stop(STOP_CLUSTER)


def stop_json_bytes(topics: Iterable[str]) -> int:
    """The bytes of the topic list as compact JSON (`["a","b"]`), the measure of STOP_TOPICS_BUDGET."""
    return len(json.dumps(list(topics), separators=(",", ":")))


def topics_stop(topics: tuple[str, ...] | None) -> Stop:
    """The stop of a factor of 0 decided over violating entries whose topics' union is `topics` (None: some
    entry's topics are not known, or none violates): those topics, unless their list exceeds the budget."""
    if topics is None or stop_json_bytes(topics) > STOP_TOPICS_BUDGET:
        return CLUSTER_STOP
    return Stop(STOP_TOPICS, topics)


@dataclass(frozen=True)
class SnapshotSummary:
    """What steps 1-3 of the decision semantics yield for one snapshot: the input of step 4."""

    cluster_id: str
    observed_at: dt.datetime
    status: Status
    active_brokers: int
    active_log_dirs: int
    missing_brokers: tuple[int, ...]
    violations: int
    policy_factor: float
    complete: bool
    worst_volume: WorstVolume | None = None
    min_available_ratio: float | None = None
    closest_volumes: tuple[ClosestVolume, ...] = ()
    # Set when the predictive step (eta.horizon) alone lowers the factor: its least factor is below 1 and below
    # every volume factor of the limits.
    predictive: PredictiveThrottle | None = None
    # The sorted union of the topics of the violating entries in force, when at least one violates and every one's
    # topics are known; None otherwise (what a stop at factor 0 refuses: Decision semantics, the stop).
    stop_topics: tuple[str, ...] | None = None
    # A partial view: a failed poll that lists the volumes of the brokers that answered. An observation of those
    # brokers (a violation in it stops at once); the brokers that did not answer are missing, so it never releases.
    partial: bool = False

    @property
    def violating(self) -> bool:
        return self.violations > 0

    @property
    def observation(self) -> bool:
        """Steps 1-3 saw brokers' readings: SUCCESS, or a partial view."""
        return self.status is Status.SUCCESS or self.partial


@dataclass(frozen=True)
class Decision:
    """The state machine's current decision for one cluster."""

    factor: float
    source: DecisionSource
    valid_from: dt.datetime
    throttled_since: dt.datetime | None = None  # when the current run of factors below 1 began

    def valid_until(self, validity: dt.timedelta) -> dt.datetime | None:
        return None if self.source is DecisionSource.FALLBACK else self.valid_from + validity


def sorted_unique(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(values)))
