"""How every reader reads a decision record's value: UTF-8 JSON, the deciding fields by type, diagnostics leniently.

The Java callback's DecisionRecord takes exactly the same records; tests/vectors/broker_quota_vectors.json holds both
to them.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from quota_pipeline.core.model import SOURCES, STATUSES, RecordError, WorstVolume
from quota_pipeline.core.record import READABLE_VERSIONS, ThrottleDecision
from quota_pipeline.core.record_time import parse_record_time
from quota_pipeline.reader.log_text import SHOWN_TIME_CHARS, printable

COUNTS = ("active_brokers", "active_log_dirs", "violations")
_WORST_FIELDS = frozenset(f.name for f in dataclasses.fields(WorstVolume))
_SOURCE_NAMES = ", ".join(SOURCES[:-1]) + f" or {SOURCES[-1]}"


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
        raise RecordError(f"source must be {_SOURCE_NAMES}, got {_describe(raw.get('source'))}")
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
