"""JSONL journals (and tick files) read and checked in this process, without Spark, staged as flattened Parquet.

Each line is judged by core/snapshot_rules.py's rules (the Python formulation, the one the streaming store uses);
what comes out is what the Spark reader (journal/spark_reader.py) stages: the valid snapshots one row per volume
with the file and line each came from, later copies of a (cluster, observed_at) rejected as duplicates of the
first by file and line, and every rejected line with its file, line number, reason and text. The staged files
then go through the same cluster tasks as any Parquet journal.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.core.columns import PARTITION, TOPICS
from quota_pipeline.core.model import RecordError, epoch_micros, format_time, from_epoch_micros, parse_time

DUPLICATE = rules.DUPLICATE_SNAPSHOT.reason
ROWS_PER_FILE = 1_000_000  # volume rows per staged file: the tasks read them a row group at a time
INT64 = (-2 ** 63, 2 ** 63 - 1)
INT32 = (-2 ** 31, 2 ** 31 - 1)
STAGED = pa.schema([
    ("cluster_id", pa.string()), ("observed_at", pa.string()), ("observed_us", pa.int64()), ("status", pa.string()),
    ("brokers", pa.list_(pa.int64())), ("fenced_brokers", pa.list_(pa.int64())), ("_file", pa.string()),
    ("_offset", pa.int64()), ("_line", pa.int64()), ("broker_id", pa.int64()), ("log_dir", pa.string()),
    ("total_bytes", pa.int64()), ("available_bytes", pa.int64()), ("error", pa.string()),
    ("top_partitions", pa.list_(PARTITION)), ("topics", TOPICS),
])


def lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line end) of every line of a journal file, gzip or not."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            yield number, raw.rstrip(b"\r\n")


def _fits(v: Any, bounds: tuple[int, int]) -> Any:
    """An integer as a typed reader holds it: one beyond the column's range is no value (None), as Spark reads it."""
    return v if not (isinstance(v, int) and not isinstance(v, bool)) or bounds[0] <= v <= bounds[1] else None


def typed(record: Any) -> Any:
    """The record with every integer the journal's columns hold (broker ids, bytes, partitions) in their Arrow
    types' range, others taken for missing: the rules then reject what could not be staged."""
    if not isinstance(record, dict):
        return record
    out = dict(record)
    for key in ("brokers", "fenced_brokers"):
        if isinstance(out.get(key), list):
            out[key] = [_fits(b, INT64) for b in out[key]]
    if isinstance(out.get("volumes"), list):
        volumes = []
        for v in out["volumes"]:
            if isinstance(v, dict):
                v = {**v, **{k: _fits(v.get(k), INT64) for k in ("broker_id", "total_bytes", "available_bytes")
                             if k in v}}
                if isinstance(v.get("top_partitions"), list):
                    v["top_partitions"] = [{**p, "partition": _fits(p.get("partition"), INT32),
                                            "size_bytes": _fits(p.get("size_bytes"), INT64)} if isinstance(p, dict)
                                           else p for p in v["top_partitions"]]
            volumes.append(v)
        out["volumes"] = volumes
    return out


_ESCAPED_SURROGATE = re.compile(r"\\[uU][dD][89a-fA-F]")


def _encodable(record: Any) -> bool:
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(value: Any) -> str | None:
    """A string field as a typed reader holds it: another JSON value as its JSON text."""
    return value if value is None or isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class _Staged:
    """Flattened rows gathered column by column, written as Parquet files of ROWS_PER_FILE rows."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files: list[str] = []
        self._clear()

    def _clear(self) -> None:
        self.columns: dict[str, list] = {f.name: [] for f in STAGED}

    def add(self, record: dict, t_us: int, file: str, line: int) -> None:
        c = self.columns
        snapshot = (record["cluster_id"], f"{from_epoch_micros(t_us):%Y-%m-%dT%H:%M:%S.%f}Z", t_us, record["status"],
                    record.get("brokers") or [], record.get("fenced_brokers") or [], file, 0, line)
        for v in record.get("volumes") or [None]:  # a snapshot without volumes: one row (a failed poll)
            for name, value in zip(STAGED.names, snapshot):
                c[name].append(value)
            v = v or {}
            c["broker_id"].append(v.get("broker_id"))
            c["log_dir"].append(v.get("log_dir"))
            c["total_bytes"].append(v.get("total_bytes"))
            c["available_bytes"].append(v.get("available_bytes"))
            c["error"].append(_text(v.get("error")))
            parts = v.get("top_partitions")
            c["top_partitions"].append(None if parts is None else [
                {"topic": p["topic"], "partition": p["partition"], "size_bytes": p["size_bytes"]} for p in parts])
            c["topics"].append(v.get("topics"))
        if len(c["_line"]) >= ROWS_PER_FILE:
            self.flush()

    def flush(self) -> None:
        if not self.columns["_line"]:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"part-{len(self.files):05d}.parquet"
        pq.write_table(pa.table({f.name: pa.array(self.columns[f.name], f.type) for f in STAGED}, schema=STAGED),
                       str(path), compression="zstd")
        self.files.append(str(path))
        self._clear()


def stage(paths: tuple[str, ...], directory: Path) -> tuple[list[str], list[dict]]:
    """(the staged Parquet files of the valid snapshots of `paths`, the rejected lines as the Spark reader reports
    them: file, line, reason, text). Files are read in name order, so the first valid copy of a (cluster,
    observed_at) met is the first by file and line, and a later copy is rejected at once: one pass, no record
    held past its line."""
    rejections: list[dict] = []
    staged = _Staged(directory)
    first: dict[tuple[str, int], tuple[str, int]] = {}
    for path in sorted(paths):
        for number, raw in lines(path):
            reason, record, text = judged(raw)
            if text is None:
                continue
            if reason is None:
                t_us = epoch_micros(parse_time(record["observed_at"]))
                at = first.setdefault((record["cluster_id"], t_us), (path, number))
                if at == (path, number):
                    staged.add(record, t_us, path, number)
                    continue
                reason = f"{DUPLICATE} (first at {at[0]}:{at[1]})"
                text = json.dumps({"cluster_id": record["cluster_id"],
                                   "observed_at": format_time(from_epoch_micros(t_us))},
                                  separators=(",", ":"), ensure_ascii=False)
            rejections.append({"file": path, "line": number, "reason": reason, "text": text})
    staged.flush()
    return staged.files, rejections


def judged(raw: bytes) -> tuple[str | None, Any, str | None]:
    """(the first rule a line breaks, None when valid; its record as the journal's columns type it; its text,
    None for a blank line, which is no snapshot and no rejection)."""
    try:
        text = raw.decode("utf-8")
        problem = None
    except UnicodeDecodeError:  # never replaced: shown as \xNN in the rejected file
        text, problem = raw.decode("utf-8", errors="backslashreplace"), rules.NOT_UTF8
    if not text.strip():
        return None, None, None
    if problem is not None:
        return problem, None, text
    try:
        record = typed(rules.decode_line(text))
    except RecordError as exc:
        return str(exc), None, text
    if _ESCAPED_SURROGATE.search(text) and not _encodable(record):
        return rules.NOT_UTF8, None, text  # a \ud800 escape names no character: no UTF-8 string holds it
    problem = rules.first_problem(record)
    if problem is None:
        try:
            parse_time(record["observed_at"])
        except RecordError:  # an offset that moves it out of datetime's range: out of the journal's range
            problem = rules.SNAPSHOT_RULES[3].reason
    return problem, record, text
