"""One compacted period of one cluster as a Parquet file: one row per volume, time-sorted, zstd-compressed.

Columns are the flattened journal form replay reads (spark_reader.read_parquet: the snapshot's fields repeated
on every volume row, a failed poll as one row without a volume) plus `message`, and, for the store, `tick`,
`journal_file` (the tick file it came from) and `observed_us` (observed_at in epoch microseconds, the sort key).
The footer's key-value metadata lists the tick files the period file replaced (layout.Sources).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quota_pipeline.core.columns import PARTITION
from quota_pipeline.core.model import epoch_micros, parse_time
from quota_pipeline.journal.layout import Sources

SNAPSHOT_FIELDS = ("cluster_id", "observed_at", "status", "message", "brokers", "fenced_brokers")
VOLUME_FIELDS = ("broker_id", "log_dir", "total_bytes", "available_bytes", "error", "top_partitions", "topics")
SCHEMA = pa.schema([
    ("cluster_id", pa.string()), ("observed_at", pa.string()), ("status", pa.string()), ("message", pa.string()),
    ("brokers", pa.list_(pa.int64())), ("fenced_brokers", pa.list_(pa.int64())),
    ("broker_id", pa.int64()), ("log_dir", pa.string()), ("total_bytes", pa.int64()),
    ("available_bytes", pa.int64()), ("error", pa.string()), ("top_partitions", pa.list_(PARTITION)),
    # The topics with a replica on the dir, null when not known (absent from files written before the column).
    ("topics", pa.list_(pa.string())),
    ("tick", pa.int64()), ("journal_file", pa.string()), ("observed_us", pa.int64()),
])
META_SOURCES = "quota_pipeline.journal.sources"
META_PERIOD = "quota_pipeline.journal.period"
META_SNAPSHOTS = "quota_pipeline.journal.snapshots"
META_FIRST = "quota_pipeline.journal.first_observed_at"
META_LAST = "quota_pipeline.journal.last_observed_at"
# Row groups of ~128k rows: a tick is read back (store.read after compaction) without decoding the hour.
ROW_GROUP_ROWS = 128 * 1024
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 9  # cold data written once, off the decision path: a smaller file is worth the CPU
INT64 = range(-2 ** 63, 2 ** 63)
INT32 = range(-2 ** 31, 2 ** 31)


@dataclass(frozen=True)
class Entry:
    """One snapshot on its way into a period file: where it came from, its record and its text as journaled."""

    journal_file: str
    tick: int
    record: dict
    text: bytes = b""

    @property
    def key(self) -> tuple[int, str]:
        return (epoch_micros(parse_time(self.record["observed_at"])), self.journal_file)


@dataclass(frozen=True)
class Footer:
    sources: Sources
    snapshots: int
    rows: int
    first_observed_at: str | None
    last_observed_at: str | None


def representable(record: dict) -> bool:
    """A valid record (rules.first_problem is None) whose values all fit the columns; others stay JSON."""
    def opt_str(v: Any) -> bool:
        return v is None or isinstance(v, str)

    def opt_int(v: Any) -> bool:
        return v is None or (isinstance(v, int) and v in INT64)

    if not (opt_str(record.get("message")) and all(opt_int(b) for b in (record.get("brokers") or ()))
            and all(opt_int(b) for b in (record.get("fenced_brokers") or ()))):
        return False
    def partition_fits(p: dict) -> bool:
        return p["partition"] in INT32 and p["size_bytes"] in INT64

    return all(opt_str(v.get("error")) and all(opt_int(v.get(k)) for k in ("broker_id", "total_bytes",
                                                                         "available_bytes"))
               and all(partition_fits(p) for p in v.get("top_partitions") or ())
               and (v.get("topics") is None or isinstance(v["topics"], list))
               for v in record.get("volumes") or ())


RECORD_SCHEMA = pa.schema([(name, SCHEMA.field(name).type) for name in SNAPSHOT_FIELDS] + [
    ("volumes", pa.list_(pa.struct([(name, SCHEMA.field(name).type) for name in VOLUME_FIELDS])))])


def rows_of(entries: list[Entry]) -> tuple[pa.Table, list[Entry]]:
    """Entries (in the order given) flattened to rows, with the entries the rows hold: parsed by Arrow from
    their text, or by Python when Arrow cannot (a tick file of more than one line, a value out of range), then
    without the records whose values do not fit the columns."""
    if entries:
        try:
            return _arrow_rows(entries), entries
        except (pa.ArrowException, ValueError):
            pass
    fits = [e for e in entries if representable(e.record)]
    return table_of(fits), fits


def _arrow_rows(entries: list[Entry]) -> pa.Table:
    import io

    import numpy as np
    import pyarrow.json as pajson

    text = b"".join(e.text.strip() + b"\n" for e in entries)
    parsed = pajson.read_json(io.BytesIO(text), read_options=pajson.ReadOptions(block_size=len(text) + 1),
                              parse_options=pajson.ParseOptions(explicit_schema=RECORD_SCHEMA,
                                                                unexpected_field_behavior="ignore"))
    if parsed.num_rows != len(entries):
        raise ValueError("not one record per tick file")
    volumes = parsed.column("volumes").combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(volumes), 0).to_numpy(zero_copy_only=False)
    per = np.maximum(lengths, 1)  # a snapshot without volumes is one row
    parent = np.repeat(np.arange(len(entries)), per)
    within = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
    index = pa.array(np.repeat(volumes.offsets.to_numpy()[:-1], per) + within, mask=np.repeat(lengths == 0, per))
    flat = volumes.values.take(index)
    head = parsed.select(list(SNAPSHOT_FIELDS)).take(pa.array(parent))
    columns = {name: head.column(name) for name in SNAPSHOT_FIELDS}
    columns.update({name: pc.struct_field(flat, name) for name in VOLUME_FIELDS})
    for name, values in (("tick", [e.tick for e in entries]), ("journal_file", [e.journal_file for e in entries]),
                         ("observed_us", [e.key[0] for e in entries])):
        columns[name] = pa.array(values, SCHEMA.field(name).type).take(pa.array(parent))
    return pa.table(columns, schema=SCHEMA)


def table_of(entries: Iterable[Entry]) -> pa.Table:
    """Entries (in the order given) flattened to rows; volume order within a snapshot is kept."""
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    for e in entries:
        r = e.record
        volumes = r.get("volumes") or [{}]
        head = (r["cluster_id"], r["observed_at"], r["status"], r.get("message"), r.get("brokers"),
                r.get("fenced_brokers"))
        tail = (e.tick, e.journal_file, e.key[0])
        for v in volumes:
            for name, value in zip(SNAPSHOT_FIELDS, head):
                cols[name].append(value)
            for name in VOLUME_FIELDS:
                cols[name].append(v.get(name))
            for name, value in zip(("tick", "journal_file", "observed_us"), tail):
                cols[name].append(value)
    return pa.table(cols, schema=SCHEMA)


class PeriodWriter:
    """Streams time-ordered tables into one Parquet file; the footer is written by close()."""

    def __init__(self, path: Path, period: str) -> None:
        self.path = path
        self.period = period
        self._writer = pq.ParquetWriter(str(path), SCHEMA, compression=COMPRESSION,
                                        compression_level=COMPRESSION_LEVEL)
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.first: tuple[int, str] | None = None
        self.last: tuple[int, str] | None = None
        self._last_key: tuple[int, str] | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        us, text, files = table.column("observed_us"), table.column("observed_at"), table.column("journal_file")
        head, tail = (us[0].as_py(), files[0].as_py()), (us[-1].as_py(), files[-1].as_py())
        if self._last_key is not None and head < self._last_key:
            raise ValueError(f"{self.path}: rows would not be in time order ({head} after {self._last_key})")
        self._last_key = tail
        if self.first is None:
            self.first = (us[0].as_py(), text[0].as_py())
        self.last = (us[-1].as_py(), text[-1].as_py())
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def close(self, sources: Sources, snapshots: int) -> None:
        self._flush()
        self._writer.add_key_value_metadata({
            META_SOURCES: sources.to_json(), META_PERIOD: self.period, META_SNAPSHOTS: str(snapshots),
            META_FIRST: self.first[1] if self.first else "", META_LAST: self.last[1] if self.last else ""})
        self._writer.close()

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            self.path.unlink(missing_ok=True)


def _source(path: Any) -> Any:
    """A path as pyarrow takes it, or an open pyarrow file as it is (a period file on an object store)."""
    return path if hasattr(path, "read") else str(path)


def read_footer(path: Path | str | Any) -> Footer:
    """The footer of a period file; raises ValueError when `path` is not one (no sources listed)."""
    meta = pq.read_metadata(_source(path))
    kv = {k.decode(): v.decode() for k, v in (meta.metadata or {}).items()}
    if META_SOURCES not in kv:
        raise ValueError(f"{path}: a Parquet file without the journal's footer (not a compacted period)")
    return Footer(Sources.from_json(kv[META_SOURCES]), int(kv.get(META_SNAPSHOTS, "0")), meta.num_rows,
                  kv.get(META_FIRST) or None, kv.get(META_LAST) or None)


def sources_of(path: Path | str) -> Sources | None:
    """The tick files a Parquet file replaced, or None when it is not a compacted period file."""
    kv = pq.read_metadata(str(path)).metadata or {}
    raw = kv.get(META_SOURCES.encode())
    return None if raw is None else Sources.from_json(raw.decode())


def row_groups(path: Path) -> Iterator[pa.Table]:
    pf = pq.ParquetFile(str(path))
    for i in range(pf.num_row_groups):
        yield with_all_columns(pf.read_row_group(i)).cast(SCHEMA)


def with_all_columns(table: pa.Table) -> pa.Table:
    """A period file's rows with the columns it was written without (topics, before it was kept) as nulls."""
    missing = [f for f in SCHEMA if f.name not in table.column_names]
    for f in missing:
        table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(SCHEMA.names) if missing else table


def read_tick(path: Path | Any, journal_file: str, tick: int) -> dict | None:
    """The record of one tick file from a period file, as the tick file held it (derived fields aside)."""
    table = pq.read_table(_source(path), filters=[("tick", "=", tick), ("journal_file", "=", journal_file)])
    rows = table.to_pylist()
    if not rows:
        return None
    first = rows[0]
    record = {k: first[k] for k in SNAPSHOT_FIELDS if k != "message"}
    # Topics not known are left out, as the tick file leaves them out.
    record["volumes"] = [{k: r.get(k) for k in VOLUME_FIELDS if k != "topics" or r.get(k) is not None}
                         for r in rows if r["broker_id"] is not None]
    if first["message"] is not None:
        record["message"] = first["message"]
    return record
