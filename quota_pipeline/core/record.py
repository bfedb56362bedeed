"""The published record: one ThrottleDecision per snapshot, and how step 4's result becomes one.

Version 2 adds fields only (`throttled_since`, `closest_volumes`, later `predictive` and `stop`); readers take
versions 1 and 2 and ignore fields they do not know.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import (
    CLUSTER_STOP, STOP_TOPICS, ClosestVolume, Decision, DecisionSource, PartitionSize,
    PredictiveThrottle, RecordError, SnapshotSummary, Status, Stop, WorstVolume, format_time, parse_time, topics_stop,
)

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class ThrottleDecision:
    """The published record: one per snapshot, keyed by cluster (schemas/throttle_decision.schema.json)."""

    cluster_id: str
    observed_at: dt.datetime
    decided_at: dt.datetime
    throttle_factor: float
    source: DecisionSource
    valid_until: dt.datetime | None
    status: Status
    active_brokers: int
    active_log_dirs: int
    missing_brokers: tuple[int, ...]
    limit: dict[str, Any]
    violations: int
    worst_volume: WorstVolume | None
    min_available_ratio: float | None
    throttled_since: dt.datetime | None = None
    closest_volumes: tuple[ClosestVolume, ...] = ()
    schema_version: int = field(default=SCHEMA_VERSION)
    # Why a predictive throttle is in force (SnapshotSummary.predictive): the log dir, its ETA and the horizon;
    # None when none is, and in records written before the field (a later version-2 field).
    predictive: PredictiveThrottle | None = None
    # What a factor of 0 stops (stop_of): the topics on the log dirs at the hard limit, or the whole cluster; None
    # when the factor is above 0, and in records written before the field (a later version-2 field).
    stop: Stop | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "cluster_id": self.cluster_id,
            "observed_at": format_time(self.observed_at),
            "decided_at": format_time(self.decided_at),
            "throttle_factor": float(self.throttle_factor),
            "source": self.source.value,
            "valid_until": format_time(self.valid_until),
            "status": self.status.value,
            "active_brokers": self.active_brokers,
            "active_log_dirs": self.active_log_dirs,
            "missing_brokers": list(self.missing_brokers),
            "limit": self.limit,
            "violations": self.violations,
            "worst_volume": None if self.worst_volume is None else self.worst_volume.to_json(),
            "min_available_ratio": self.min_available_ratio,
            "throttled_since": format_time(self.throttled_since),
            "closest_volumes": [v.to_json() for v in self.closest_volumes],
            "predictive": None if self.predictive is None else self.predictive.to_json(),
            "stop": None if self.stop is None else self.stop.to_json(),
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "ThrottleDecision":
        """Inverse of to_json; raises RecordError (reader side: counted and skipped)."""
        try:
            if raw.get("schema_version") not in READABLE_VERSIONS:
                raise RecordError(f"unknown schema_version {raw.get('schema_version')!r}")
            worst = raw.get("worst_volume")
            return cls(
                cluster_id=str(raw["cluster_id"]),
                observed_at=parse_time(raw["observed_at"]),
                decided_at=parse_time(raw["decided_at"]),
                throttle_factor=float(raw["throttle_factor"]),
                source=DecisionSource(raw["source"]),
                valid_until=None if raw.get("valid_until") is None else parse_time(raw["valid_until"]),
                status=Status(raw["status"]),
                active_brokers=int(raw["active_brokers"]),
                active_log_dirs=int(raw["active_log_dirs"]),
                missing_brokers=tuple(int(b) for b in raw.get("missing_brokers") or ()),
                limit=dict(raw.get("limit") or {}),
                violations=int(raw["violations"]),
                worst_volume=None if worst is None else WorstVolume(**worst),
                min_available_ratio=raw.get("min_available_ratio"),
                throttled_since=None if raw.get("throttled_since") is None else parse_time(raw["throttled_since"]),
                closest_volumes=_closest_volumes(raw.get("closest_volumes")),
                predictive=predictive_of(raw.get("predictive")),
                stop=stop_from_json(raw.get("stop")),
                schema_version=int(raw["schema_version"]),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # OverflowError: int(Infinity)
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"not a throttle decision record: {exc}") from exc


def build_record(s: SnapshotSummary, d: Decision, settings: Settings, decided_at: dt.datetime,
                 cluster_name: str | None = None) -> ThrottleDecision:
    """The published record for one snapshot and the decision taken on it."""
    return ThrottleDecision(
        cluster_id=cluster_name or s.cluster_id,
        observed_at=s.observed_at,
        decided_at=decided_at,
        throttle_factor=d.factor,
        source=d.source,
        valid_until=d.valid_until(settings.validity),
        status=s.status,
        active_brokers=s.active_brokers,
        active_log_dirs=s.active_log_dirs,
        missing_brokers=s.missing_brokers,
        limit=settings.limits.to_json(),
        violations=s.violations,
        worst_volume=s.worst_volume,
        min_available_ratio=s.min_available_ratio,
        throttled_since=d.throttled_since,
        closest_volumes=s.closest_volumes,
        predictive=s.predictive,
        stop=stop_of(s, d),
    )


def stop_of(s: SnapshotSummary, d: Decision) -> Stop | None:
    """What the decision stops: nothing above a factor of 0; at 0, the topics of the violating entries in force
    (s.stop_topics, RETAINED decisions included), else the whole cluster: on the fallback, when none violates (a
    predictive factor of 0), when some violating entry's topics are not known, or when the list is too long for
    the record (model.STOP_TOPICS_BUDGET)."""
    if d.factor > 0:
        return None
    if d.source is DecisionSource.FALLBACK:
        return CLUSTER_STOP
    return topics_stop(s.stop_topics)


def stop_from_json(raw: Any) -> Stop | None:
    """The record's `stop`: absent (an older record) or null reads as none. Unlike the diagnostics it is acted on,
    so one that cannot be read stops the cluster (the safe reading of a stop)."""
    if raw is None:
        return None
    if isinstance(raw, dict) and raw.get("scope") == STOP_TOPICS and isinstance(raw.get("topics"), list) \
            and all(isinstance(t, str) for t in raw["topics"]):
        return Stop(STOP_TOPICS, tuple(raw["topics"]))
    return CLUSTER_STOP


def _closest_volumes(raw: Any) -> tuple[ClosestVolume, ...]:
    """Diagnostics only: a reader must act on a record whose diagnostics it cannot read (as the Java callback,
    which reads none of them), so malformed ones read as none."""
    try:
        return tuple(_closest(v) for v in raw or ())
    except (KeyError, TypeError, ValueError):
        return ()


def predictive_of(raw: Any) -> PredictiveThrottle | None:
    """The record's `predictive`, diagnostics like closest_volumes: absent (an older record), null or malformed
    reads as none."""
    if raw is None:
        return None
    try:
        eta, horizon = raw["eta_seconds"], raw["horizon_seconds"]
        if not all(type(v) in (int, float) for v in (raw["broker_id"], eta, horizon)) \
                or not isinstance(raw["log_dir"], str):
            return None
        return PredictiveThrottle(int(raw["broker_id"]), raw["log_dir"], float(eta), float(horizon))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def _closest(raw: dict[str, Any]) -> ClosestVolume:
    return ClosestVolume(
        int(raw["broker_id"]), str(raw["log_dir"]), raw.get("available_bytes"), raw.get("total_bytes"),
        raw.get("available_ratio"), raw.get("headroom_bytes"), raw.get("fill_rate_bytes_per_second"),
        raw.get("eta_seconds"), tuple(PartitionSize(str(p["topic"]), int(p["partition"]), int(p["size_bytes"]))
                                      for p in raw.get("top_partitions") or ()),
        None if raw.get("reason") is None else str(raw["reason"]))
