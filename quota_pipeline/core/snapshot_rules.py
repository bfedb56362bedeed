"""The validation rules of a journal record, once: the table every reader applies, each rule with its key, reason,
Python check and violating example.

Every reader reports the first rule a record breaks, in this order and with this reason: the Python reader
(`parse_snapshot`: the streaming source, replay without Spark, the journal's tools), the Spark reader
(journal/spark_reader.py, its column for each rule found by the rule's key) and the decision pass's vectorised checks
of flattened rows (core/compiled/rule_codes.py, keyed alike). tests/spark/test_journal_rules.py feeds each rule's example
to all three, and holds the JSON Schema to the rules it states.
Before the record's rules come the line's: its bytes must be UTF-8 (never replaced: a damaged byte in a key would
make a phantom cluster) and its text JSON (a truncated line says so, not "not a JSON object").
Differences left: Spark reads a number where a string is expected (cluster_id 5, log_dir 5) as its text, and
reads the first of two objects run together on one line (`{...}{...}`), which Python rejects as not JSON.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Callable

import isodate

from quota_pipeline.core.model import STATUSES, PartitionSize, RecordError, Status, Volume, VolumeSnapshot, parse_time
NOT_UTF8 = "not valid UTF-8"
NOT_JSON = "not valid JSON (a truncated or damaged line?)"
# The times a snapshot may carry: decisions, reports and pandas (whose range ends in 2262) handle them all.
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
LATEST = dt.datetime(2200, 1, 1, tzinfo=dt.timezone.utc)  # exclusive
EARLIEST_US, LATEST_US = 0, int((LATEST - EARLIEST).total_seconds()) * 1_000_000


@dataclass(frozen=True)
class Rule:
    """One validation rule: `key` names it (each reader's formulation is found by it), `reason` is what every reader
    says, `broken(record)` is the Python check (of a parsed record; of one volume for VOLUME_RULES), `example` a
    record that breaks it and no rule before it, and `in_schema` whether the JSON Schema states it too (comparisons
    between values and a date range are beyond JSON Schema)."""

    key: str
    reason: str
    broken: Callable[[Any], bool]
    example: Any
    in_schema: bool = True


def _record(**fields: Any) -> dict:
    """A valid snapshot record with `fields` changed (a value of ... drops the field)."""
    record = {"cluster_id": "c1", "observed_at": "2026-11-21T10:00:00.000Z", "status": "SUCCESS", "brokers": [1],
              "fenced_brokers": [], "volumes": [_volume()]}
    record.update(fields)
    return {k: v for k, v in record.items() if v is not ...}


def _volume(**fields: Any) -> dict:
    volume = {"broker_id": 1, "log_dir": "/d", "total_bytes": 100, "available_bytes": 40, "error": None}
    volume.update(fields)
    return {k: v for k, v in volume.items() if v is not ...}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _volumes(r: dict) -> list:
    return r.get("volumes") or []


def _timestamp(v: Any) -> dt.datetime | None:
    if not isinstance(v, str):
        return None
    try:
        return isodate.parse_datetime(v)
    except (ValueError, isodate.ISO8601Error):
        return None


def _out_of_range(v: Any) -> bool:
    t = _timestamp(v)
    if t is None:
        return False  # the rule before says so
    try:
        t = t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc)
        return not EARLIEST <= t < LATEST
    except OverflowError:  # an offset that moves year 1 or 9999 out of datetime's range
        return True


def _broker_list(v: Any) -> bool:
    return isinstance(v, list) and all(_is_int(b) for b in v)


def _bytes_missing(v: dict) -> bool:
    return v.get("error") is None and not (_is_int(v.get("total_bytes")) and _is_int(v.get("available_bytes")))


def _bytes_negative(v: dict) -> bool:
    return any(_is_int(v.get(k)) and v[k] < 0 for k in ("total_bytes", "available_bytes"))


def _more_available_than_total(v: dict) -> bool:
    return _is_int(v.get("total_bytes")) and _is_int(v.get("available_bytes")) and v["available_bytes"] > v["total_bytes"]


def _partitions_ok(v: dict) -> bool:
    parts = v.get("top_partitions") or []
    return isinstance(parts, list) and all(
        isinstance(p, dict) and isinstance(p.get("topic"), str) and _is_int(p.get("partition"))
        and _is_int(p.get("size_bytes")) for p in parts)


def _topics_broken(v: dict) -> bool:
    topics = v.get("topics")
    return topics is not None and not (isinstance(topics, list) and all(isinstance(t, str) for t in topics))


def _duplicate_keys(r: dict) -> bool:
    keys = [(v.get("broker_id"), v.get("log_dir")) for v in _volumes(r)]
    return len(set(keys)) != len(keys)


# Snapshot rules first, then the volume rules: every reader stops at the first that is broken.
SNAPSHOT_RULES = (
    Rule("object", "not a JSON object", lambda r: not isinstance(r, dict), [1, 2]),
    Rule("cluster_id", "cluster_id must be a non-empty string",
         lambda r: not (isinstance(r.get("cluster_id"), str) and r["cluster_id"]), _record(cluster_id="")),
    Rule("timestamp", "observed_at must be an ISO-8601 timestamp", lambda r: _timestamp(r.get("observed_at")) is None,
         _record(observed_at="yesterday")),
    Rule("time_range", "observed_at must be from 1970-01-01 to 2199-12-31 (UTC)",
         lambda r: _out_of_range(r.get("observed_at")), _record(observed_at="1969-12-31T23:59:59Z"), in_schema=False),
    Rule("status", f"status must be one of {', '.join(STATUSES)}", lambda r: r.get("status") not in STATUSES,
         _record(status="OK")),
    Rule("brokers", "brokers must be a list of broker ids",
         lambda r: not _broker_list(r.get("brokers") if r.get("brokers") is not None or r.get("status") == "SUCCESS"
                                    else []), _record(brokers=[1, None])),
    Rule("fenced_brokers", "fenced_brokers must be a list of broker ids",
         lambda r: not _broker_list(r.get("fenced_brokers") or []), _record(fenced_brokers=[None])),
    Rule("volumes", "volumes must be a list of objects (top_partitions a list of {topic, partition, size_bytes})",
         lambda r: not isinstance(_volumes(r), list) or not all(isinstance(v, dict) and _partitions_ok(v)
                                                                for v in _volumes(r)),
         _record(volumes=[_volume(top_partitions=[{"topic": None, "partition": 3, "size_bytes": 40}])])),
)
VOLUME_RULES = (
    Rule("broker_id", "volumes[].broker_id must be an integer", lambda v: not _is_int(v.get("broker_id")),
         _record(volumes=[_volume(broker_id=None)])),
    Rule("log_dir", "volumes[].log_dir must be a non-empty string",
         lambda v: not (isinstance(v.get("log_dir"), str) and v["log_dir"]), _record(volumes=[_volume(log_dir="")])),
    Rule("bytes", "a volume without error needs integer total_bytes and available_bytes", _bytes_missing,
         _record(volumes=[_volume(total_bytes=None)])),
    Rule("bytes_negative", "volumes[] byte counts must be >= 0 (an offline dir has error set and null bytes)",
         _bytes_negative, _record(volumes=[_volume(available_bytes=-1)])),
    Rule("available_le_total", "volumes[].available_bytes must not exceed total_bytes", _more_available_than_total,
         _record(volumes=[_volume(available_bytes=101)]), in_schema=False),
    Rule("topics", "volumes[].topics must be a list of topic names (absent or null: not known)", _topics_broken,
         _record(volumes=[_volume(topics=["orders", None])])),
)
DUPLICATE_VOLUMES = Rule("duplicate_volumes", "volumes lists the same (broker_id, log_dir) twice", _duplicate_keys,
                         _record(volumes=[_volume(), _volume()]), in_schema=False)
# The rules of a journal beyond one record, which the Spark reader and the pass apply. Their examples are lists: two
# records of one cluster and time (the later is the duplicate); the flattened rows of one snapshot.
DUPLICATE_SNAPSHOT = Rule("duplicate_snapshot", "duplicate snapshot of this cluster and observed_at",
                          lambda records: False, [_record(), _record()], in_schema=False)
DISAGREEING_ROWS = Rule(
    "disagreeing_rows", "rows of one snapshot disagree on status", lambda rows: False,
    [{**_record(volumes=...), **_volume()}, {**_record(volumes=..., status="TIMEOUT"), **_volume(broker_id=2)}],
    in_schema=False)
# A snapshot as flattened rows (Parquet journals, the decision pass's input frame), checked in this order: a row is
# always an object, so the rows' agreement on the status takes that rule's place.
FLATTENED_RULES = (DISAGREEING_ROWS, *SNAPSHOT_RULES[1:], *VOLUME_RULES, DUPLICATE_VOLUMES)
BY_KEY = {r.key: r for r in (*SNAPSHOT_RULES, *VOLUME_RULES, DUPLICATE_VOLUMES, DUPLICATE_SNAPSHOT, DISAGREEING_ROWS)}


def first_problem(record: Any) -> str | None:
    """The reason of the first rule `record` breaks (the Python formulation), None when it is valid."""
    for rule in SNAPSHOT_RULES:
        if rule.broken(record):
            return rule.reason
    # Volume rules in rule order over all volumes, as the Spark reader's array_min over rule indexes.
    for rule in VOLUME_RULES:
        if any(rule.broken(v) for v in _volumes(record)):
            return rule.reason
    return DUPLICATE_VOLUMES.reason if DUPLICATE_VOLUMES.broken(record) else None


# Flattened Parquet journals: each column the readers use, and the Arrow types it may have (`int`: any integer).
PARQUET_COLUMNS = {
    "cluster_id": "string", "observed_at": "string", "status": "string", "message": "string",
    "brokers": "list<int>", "fenced_brokers": "list<int>", "broker_id": "int", "log_dir": "string",
    "total_bytes": "int", "available_bytes": "int", "error": "string", "observed_us": "int",
    "top_partitions": "list<struct<topic: string, partition: int, size_bytes: int>>", "topics": "list<string>",
}


def parquet_schema_problem(schema: Any) -> str | None:
    """Why a Parquet file (its pyarrow schema) is no flattened journal, None when its columns can be read."""
    import pyarrow as pa

    def kind(t: pa.DataType) -> str:
        if pa.types.is_dictionary(t):
            return kind(t.value_type)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "string"
        if pa.types.is_integer(t):
            return "int"
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return f"list<{kind(t.value_type)}>"
        if pa.types.is_struct(t):
            return "struct<" + ", ".join(f"{f.name}: {kind(f.type)}" for f in t) + ">"
        return str(t)

    present = [n for n in schema.names if n in PARQUET_COLUMNS]
    if not present:
        return (f"wrong schema: none of a flattened journal's columns ({', '.join(PARQUET_COLUMNS)}); "
                "is this a snapshot journal?")
    for name in present:
        got = kind(schema.field(name).type)
        if got != PARQUET_COLUMNS[name] and not (got == "null"):
            return f"wrong schema: column {name} is {schema.field(name).type}, a journal's is {PARQUET_COLUMNS[name]}"
    return None


def decode_line(line: bytes | str) -> Any:
    """One journal line as parsed JSON, or RecordError: NOT_UTF8 (bytes are never replaced), NOT_JSON."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(NOT_UTF8) from None
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the interpreter's stack
        raise RecordError(NOT_JSON) from None


def parse_line(line: bytes | str) -> VolumeSnapshot:
    """A JSONL journal line as a VolumeSnapshot, or RecordError with the first rule (line, then record) it breaks."""
    return parse_snapshot(decode_line(line))


def parse_snapshot(raw: Any) -> VolumeSnapshot:
    """A journal record as a VolumeSnapshot, or RecordError with the reason of the first rule it breaks."""
    problem = first_problem(raw)
    if problem is not None:
        raise RecordError(problem)
    volumes = tuple(Volume(v["broker_id"], v["log_dir"], None, None, v["error"]) if v.get("error") is not None
                    else Volume(v["broker_id"], v["log_dir"], v["total_bytes"], v["available_bytes"],
                                top_partitions=tuple(PartitionSize(p["topic"], p["partition"], p["size_bytes"])
                                                     for p in v.get("top_partitions") or ()),
                                topics=None if v.get("topics") is None else tuple(v["topics"]))
                    for v in _volumes(raw))
    message = raw.get("message")
    return VolumeSnapshot(
        cluster_id=raw["cluster_id"], observed_at=parse_time(raw["observed_at"]), status=Status(raw["status"]),
        brokers=tuple(raw.get("brokers") or ()), fenced_brokers=tuple(raw.get("fenced_brokers") or ()),
        volumes=volumes, message=message if isinstance(message, str) else None)
