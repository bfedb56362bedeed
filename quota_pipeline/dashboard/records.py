"""One decision record as the dashboard shows it: schema_version 1 or 2, read by the brokers' rules plus v2's fields.

The record is read by reader.parsing alone (parse_decision, record_json): the page has no grammar of its own."""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from quota_pipeline.reader.log_text import SHOWN_TIME_CHARS, printable
from quota_pipeline.reader.parsing import parse_decision, record_json
from quota_pipeline.core.model import OFFLINE, OFFLINE_FILLING, PartitionSize, PredictiveThrottle, Stop
from quota_pipeline.core.record import ThrottleDecision, predictive_of


OFFLINE_REASONS = (OFFLINE, OFFLINE_FILLING)  # why an entry is in force while its dir is offline, as the steps write it


@dataclass(frozen=True)
class VolumeView:
    """A log dir close to the hard limit: v2's closest_volumes entry, or v1's worst_volume (fewer facts)."""

    broker_id: int
    log_dir: str
    available_bytes: int | None
    available_ratio: float | None
    total_bytes: int | None = None
    headroom_bytes: int | None = None
    fill_rate_bytes_per_second: float | None = None
    eta_seconds: float | None = None
    top_partitions: tuple[PartitionSize, ...] = ()
    reason: str | None = None  # OFFLINE or OFFLINE_FILLING (went offline after filling to the limit); v2 only

    @property
    def offline(self) -> bool:
        return self.available_bytes is None

    def to_json(self) -> dict[str, Any]:
        return {
            "broker_id": self.broker_id, "log_dir": self.log_dir, "available_bytes": self.available_bytes,
            "available_ratio": self.available_ratio, "total_bytes": self.total_bytes,
            "headroom_bytes": self.headroom_bytes, "fill_rate_bytes_per_second": self.fill_rate_bytes_per_second,
            "eta_seconds": self.eta_seconds, "offline": self.offline,
            "top_partitions": [{"topic": p.topic, "partition": p.partition, "size_bytes": p.size_bytes}
                               for p in self.top_partitions],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class DecisionView:
    """The facts of one record the page and `tail` show; `note` says which v2 field could not be read."""

    cluster_id: str
    schema_version: int
    observed_at: dt.datetime
    decided_at: dt.datetime
    throttle_factor: float
    source: str
    valid_until: dt.datetime | None
    status: str
    active_brokers: int
    missing_brokers: tuple[int, ...]
    limit: dict[str, Any]
    violations: int
    min_available_ratio: float | None
    throttled_since: dt.datetime | None
    volumes: tuple[VolumeView, ...]
    volumes_listed: bool  # True: v2's closest_volumes; False: v1's worst volume only
    note: str | None = None
    predictive: PredictiveThrottle | None = None  # why a predictive throttle is in force (a later v2 field)
    stop: Stop | None = None  # what a factor of 0 refuses, as core.record reads it (a malformed one: the cluster)


def read_decision(value: bytes) -> ThrottleDecision:
    """A record value read by the brokers' rules (what they skip, the page calls unreadable); raises ValueError."""
    decision = parse_decision(value)
    try:
        _number(decision.min_available_ratio, finite=False)
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"min_available_ratio: {exc}") from exc
    return decision


def view_of(decision: ThrottleDecision, value: bytes) -> DecisionView:
    """The facts the page shows of a record read by read_decision: v2's fields are taken from the JSON itself,
    so that one it cannot read is shown as such (`note`) instead of silently missing."""
    raw = record_json(value)
    volumes, note = _v2_volumes(raw)
    since, since_note = decision.throttled_since, None
    if since is None and raw.get("throttled_since") is not None:  # parse_decision reads a bad one as none
        since_note = f"throttled_since is not a timestamp ({printable(str(raw['throttled_since']), SHOWN_TIME_CHARS)})"
    listed = volumes is not None
    predictive = predictive_of(raw.get("predictive"))
    if predictive is not None and not (math.isfinite(predictive.eta_seconds)
                                       and math.isfinite(predictive.horizon_seconds)):
        predictive = None  # the page's JSON carries no Infinity or NaN
    if predictive is None and raw.get("predictive") is not None:
        note = note or f"predictive could not be read ({printable(repr(raw.get('predictive')))})"
    limit, limit_note = _limit(decision.limit)
    note = note or limit_note
    try:
        ratio = _number(decision.min_available_ratio)
    except ValueError as exc:  # brokers take the record; the page shows the rest of it
        ratio, note = None, note or f"min_available_ratio could not be read ({exc})"
    if volumes is None and decision.worst_volume is not None:
        w = decision.worst_volume
        try:
            volumes = (VolumeView(int(w.broker_id), str(w.log_dir), _integer(w.available_bytes),
                                  _number(w.available_ratio)),)
        except (TypeError, ValueError, OverflowError) as exc:
            note = note or f"worst_volume could not be read ({exc})"
    return DecisionView(
        cluster_id=decision.cluster_id, schema_version=decision.schema_version, observed_at=decision.observed_at,
        decided_at=decision.decided_at, throttle_factor=decision.throttle_factor, source=decision.source.value,
        valid_until=decision.valid_until, status=decision.status.value, active_brokers=decision.active_brokers,
        missing_brokers=decision.missing_brokers, limit=limit, violations=decision.violations,
        min_available_ratio=ratio, throttled_since=since,
        volumes=volumes or (), volumes_listed=listed, note=note or since_note, predictive=predictive,
        stop=decision.stop)


def parse_record(value: bytes) -> DecisionView:
    """read_decision and view_of in one; raises ValueError."""
    return view_of(read_decision(value), value)


def _v2_volumes(raw: dict[str, Any]) -> tuple[tuple[VolumeView, ...] | None, str | None]:
    """closest_volumes when present and readable; a bad entry leaves the decision readable, with a note."""
    entries = raw.get("closest_volumes")
    if entries is None:
        return None, None
    try:
        if not isinstance(entries, list):
            raise TypeError("not a list")
        return tuple(_volume(e) for e in entries), None
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        return None, f"closest_volumes could not be read ({exc})"


def _limit(limit: Any) -> tuple[dict[str, Any], str | None]:
    """The record's `limit` as the page may show it: each of hard and soft an object with a type (text) and a finite
    number, else null with a note (brokers ignore `limit`; the page's JSON must stay valid)."""
    out: dict[str, Any] = {"hard": None, "soft": None}
    if not isinstance(limit, dict):
        return out, None if limit is None else "limit could not be read (not an object)"
    note = None
    for rank in ("hard", "soft"):
        entry = limit.get(rank)
        if entry is None:
            continue
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                raise TypeError("not an object with a type")
            out[rank] = {"type": entry["type"][:60], "value": _number(entry.get("value"))}
        except (TypeError, ValueError, OverflowError) as exc:
            note = note or f"limit.{rank} could not be read ({exc})"
    return out, note


def _volume(e: dict[str, Any]) -> VolumeView:
    if not isinstance(e, dict):
        raise TypeError(f"an entry is not an object ({printable(repr(e))})")
    parts = tuple(PartitionSize(str(p["topic"]), int(p["partition"]), int(p["size_bytes"]))
                  for p in e.get("top_partitions") or ())
    return VolumeView(
        broker_id=int(e["broker_id"]), log_dir=str(e["log_dir"]),
        available_bytes=_integer(e.get("available_bytes")), available_ratio=_number(e.get("available_ratio")),
        total_bytes=_integer(e.get("total_bytes")), headroom_bytes=_integer(e.get("headroom_bytes")),
        fill_rate_bytes_per_second=_number(e.get("fill_rate_bytes_per_second")),
        eta_seconds=_number(e.get("eta_seconds")), top_partitions=parts,
        reason=e.get("reason") if e.get("reason") in OFFLINE_REASONS else None)  # outside text: only the known words


def _number(value: Any, finite: bool = True) -> float | None:
    """A JSON number as a float; TypeError when it is not one, ValueError when `finite` and it is Infinity or NaN
    (Python's json reads them, as the brokers do; the page's own JSON must not carry them)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    number = float(value)  # an int beyond float's range raises OverflowError
    if finite and not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return number


def _integer(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else int(number)
