"""Reading snapshot journals into Spark: JSONL (via a Python data source, for line numbers) or flattened Parquet.

The Python reader only splits files into lines; every field is parsed and checked by Spark SQL, so
no Python code runs per volume. A line that is not a valid snapshot becomes a rejected row with its
file, line number and reason: reported and written out by the caller, never silently dropped.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from quota_pipeline.core.model import STATUSES

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")
PARQUET_SUFFIXES = (".parquet",)
SPLIT_BYTES = 64 * 1024 * 1024
BATCH_LINES = 4096
BATCH_BYTES = 16 * 1024 * 1024

VOLUME_TYPE = T.StructType([
    T.StructField("broker_id", T.LongType()),
    T.StructField("log_dir", T.StringType()),
    T.StructField("total_bytes", T.LongType()),
    T.StructField("available_bytes", T.LongType()),
    T.StructField("error", T.StringType()),
])
SNAPSHOT_JSON_TYPE = T.StructType([
    T.StructField("cluster_id", T.StringType()),
    T.StructField("observed_at", T.StringType()),
    T.StructField("status", T.StringType()),
    T.StructField("brokers", T.ArrayType(T.LongType())),
    T.StructField("fenced_brokers", T.ArrayType(T.LongType())),
    T.StructField("volumes", T.ArrayType(VOLUME_TYPE)),
])
# What parse() returns: one row per snapshot, volumes nested (validated), plus where it came from.
SNAPSHOT_COLUMNS = ("cluster_id", "observed_at", "status", "brokers", "fenced_brokers", "volumes")
# `line` counts from the start of the split at byte `offset` (0 for a whole file); rejections()
# turns it into the file's line number, so that no split has to count the newlines before it.
REJECTED_COLUMNS = ("file", "offset", "line", "reason", "text", "first")


class JournalInputError(Exception):
    """The input path holds nothing that can be read as a journal; the message says what to pass."""


@dataclass(frozen=True)
class Inputs:
    jsonl: tuple[str, ...]
    parquet: tuple[str, ...]


def find_inputs(path: str) -> Inputs:
    """A file or a directory (searched recursively) of journal files, by extension."""
    p = Path(path)
    if not p.exists():
        raise JournalInputError(f"{path}: no such file or directory; pass a journal file or a directory of them")
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
    jsonl = tuple(str(f) for f in files if f.name.endswith(JSONL_SUFFIXES))
    parquet = tuple(str(f) for f in files if f.name.endswith(PARQUET_SUFFIXES))
    if p.is_file() and not (jsonl or parquet):
        jsonl = (str(p),)  # an explicitly named file is read as JSONL whatever its name
    if not (jsonl or parquet):
        raise JournalInputError(
            f"{path}: no journal files found (looked for {', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)})")
    return Inputs(jsonl, parquet)


@dataclass(frozen=True)
class _Split(InputPartition):
    path: str
    start: int
    end: int  # -1: to the end (compressed files are never split)


class JournalLinesReader(DataSourceReader):
    def __init__(self, paths: list[str], split_bytes: int = SPLIT_BYTES) -> None:
        self.paths = paths
        self.split_bytes = split_bytes

    def partitions(self) -> list[_Split]:
        splits: list[_Split] = []
        for path in self.paths:
            size = os.path.getsize(path)
            if path.endswith(".gz") or size <= self.split_bytes:
                splits.append(_Split(path, 0, -1))
                continue
            splits.extend(_Split(path, a, min(a + self.split_bytes, size))
                          for a in range(0, size, self.split_bytes))
        return splits

    def read(self, partition: _Split) -> Iterator:
        import pyarrow as pa

        lines: list[int] = []
        texts: list[str] = []
        size = 0

        def batch():
            n = len(texts)
            return pa.RecordBatch.from_arrays(
                [pa.array([partition.path] * n), pa.array([partition.start] * n, pa.int64()),
                 pa.array(lines, pa.int64()), pa.array(texts)], names=["file", "offset", "line", "text"])

        for number, text in _lines(partition):
            if not text.strip():
                continue
            lines.append(number)
            texts.append(text)
            size += len(text)
            if len(texts) >= BATCH_LINES or size >= BATCH_BYTES:
                yield batch()
                lines, texts, size = [], [], 0
        if texts:
            yield batch()


def _lines(split: _Split) -> Iterator[tuple[int, str]]:
    """(line number within the split, text) of the lines that start inside the split."""
    if split.end < 0:
        opener = gzip.open if split.path.endswith(".gz") else open
        with opener(split.path, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                yield number, raw.decode("utf-8", errors="replace").rstrip("\r\n")
        return
    with open(split.path, "rb") as fh:
        if split.start > 0:
            fh.seek(split.start - 1)
            if fh.read(1) != b"\n":
                fh.readline()  # the line that straddles the boundary belongs to the previous split
        position, number = fh.tell(), 1
        while position < split.end:
            raw = fh.readline()
            if not raw:
                break
            yield number, raw.decode("utf-8", errors="replace").rstrip("\r\n")
            number += 1
            position += len(raw)


class LineNumbers:
    """Line numbers of (file, split offset, line in split): counts newlines once per file, only when asked."""

    def __init__(self) -> None:
        self._newlines: dict[tuple[str, int], int] = {}  # newlines in [0, offset)
        self._first: dict[tuple[str, int], int] = {}     # lines before a split's first line

    def __call__(self, file: str, offset: int, line: int) -> int:
        if offset == 0:
            return line
        key = (file, offset)
        if key not in self._first:
            known = max((o for f, o in self._newlines if f == file and o < offset), default=0)
            count = self._newlines.get((file, known), 0)
            with open(file, "rb") as fh:
                fh.seek(known)
                remaining = offset - known
                while remaining > 0:
                    chunk = fh.read(min(remaining, 8 * 1024 * 1024))
                    count += chunk.count(b"\n")
                    remaining -= len(chunk)
                fh.seek(offset - 1)
                starts_a_line = fh.read(1) == b"\n"
            self._newlines[key] = count
            # Unless the split starts a line, its first line follows the one straddling the boundary.
            self._first[key] = count if starts_a_line else count + 1
        return self._first[key] + line


def rejections(rejected: DataFrame) -> Iterator[dict]:
    """Rejected rows in file order with their real line numbers (rejects are rare: read on the driver)."""
    number = LineNumbers()
    for r in rejected.orderBy("file", "offset", "line").toLocalIterator():
        reason = r.reason
        if r.first is not None:
            reason += f" (first at {r.first.file}:{number(r.first.file, r.first.offset, r.first.line)})"
        yield {"file": r.file, "line": number(r.file, r.offset, r.line), "reason": reason, "text": r.text}


class JournalLines(DataSource):
    """`spark.read.format("journal_lines").option("paths", json_list).load()`: (file, offset, line, text)."""

    @classmethod
    def name(cls) -> str:
        return "journal_lines"

    def schema(self) -> str:
        return "file string, offset long, line long, text string"

    def reader(self, schema: T.StructType) -> DataSourceReader:
        import json

        return JournalLinesReader(json.loads(self.options["paths"]),
                                  int(self.options.get("split_bytes", SPLIT_BYTES)))


def _first_problem(*checks: tuple[Column, str]) -> Column:
    expr = F.lit(None).cast("string")
    for cond, reason in reversed(checks):
        expr = F.when(cond, F.lit(reason)).otherwise(expr)
    return expr


VOLUME_PROBLEMS = (
    "volumes[] entries must be objects",
    "volumes[].broker_id must be an integer",
    "volumes[].log_dir must be a non-empty string",
    "a volume without error needs integer total_bytes and available_bytes",
    "volumes[] byte counts must be >= 0 (an offline dir has error set and null bytes)",
)


def _volume_checks(volumes: Column) -> list[tuple[Column, str]]:
    """Problems of a snapshot's volumes, found in one pass over the array (lambdas are not compiled)."""
    def code(v: Column) -> Column:
        checks = (
            v.isNull(),
            v.broker_id.isNull(),
            F.coalesce(v.log_dir, F.lit("")) == "",
            v.error.isNull() & (v.total_bytes.isNull() | v.available_bytes.isNull()),
            (v.total_bytes < 0) | (v.available_bytes < 0),
        )
        out = F.lit(len(checks))
        for i in reversed(range(len(checks))):
            out = F.when(checks[i], F.lit(i)).otherwise(out)
        return out

    first = F.array_min(F.transform(volumes, code))
    # Keys as strings: array_distinct over structs is about 8x slower on 1000-volume snapshots.
    keys = F.transform(volumes, lambda v: F.concat_ws("\u0000", v.broker_id.cast("string"), v.log_dir))
    return [(first == i, reason) for i, reason in enumerate(VOLUME_PROBLEMS)] + [
        (F.size(F.array_distinct(keys)) != F.size(volumes), "volumes lists the same (broker_id, log_dir) twice")]


def _check(df: DataFrame) -> DataFrame:
    """Every parsed row with the first problem found in it (`reason`, null when valid)."""
    s = F.col("snap")
    volumes = F.coalesce(s.volumes, F.array().cast(T.ArrayType(VOLUME_TYPE)))
    checked = df.select(
        "file", "offset", "line", "text",
        s.cluster_id.alias("cluster_id"),
        F.try_to_timestamp(s.observed_at).alias("observed_at"),
        s.status.alias("status"),
        F.coalesce(s.brokers, F.array().cast("array<bigint>")).alias("brokers"),
        F.coalesce(s.fenced_brokers, F.array().cast("array<bigint>")).alias("fenced_brokers"),
        volumes.alias("volumes"),
        _first_problem(
            (F.col("is_object").isNull(), "not a JSON object"),
            (F.coalesce(s.cluster_id, F.lit("")) == "", "cluster_id must be a non-empty string"),
            (F.try_to_timestamp(s.observed_at).isNull(), "observed_at must be an ISO-8601 timestamp"),
            (~F.coalesce(s.status.isin(*STATUSES), F.lit(False)), f"status must be one of {', '.join(STATUSES)}"),
            ((s.status == "SUCCESS") & s.brokers.isNull(), "brokers must be a list of broker ids"),
            (F.exists(F.coalesce(s.brokers, F.array().cast("array<bigint>")), lambda b: b.isNull()),
             "brokers must be a list of broker ids"),
            *_volume_checks(volumes),
        ).alias("reason"),
    )
    # Keep the raw text only where it is needed (rejected rows): it is most of the input's size.
    return checked.withColumn("text", F.when(F.col("reason").isNotNull(), F.col("text")))


def _split(checked: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid snapshots, rejected rows); later duplicates of a (cluster, observed_at) are rejected."""
    # Duplicates are rare: find them on a slim projection, then flag them through a broadcast join
    # instead of shuffling every snapshot (with its volumes) through a window.
    dups = checked.where(F.col("reason").isNull()).groupBy("cluster_id", "observed_at").agg(
        F.count("*").alias("copies"), F.min(F.struct("file", "offset", "line")).alias("first")).where("copies > 1")
    checked = checked.join(F.broadcast(dups.drop("copies")), ["cluster_id", "observed_at"], "left")
    is_dup = F.col("reason").isNull() & F.col("first").isNotNull() & (
        (F.col("first.file") != F.col("file")) | (F.col("first.offset") != F.col("offset"))
        | (F.col("first.line") != F.col("line")))
    checked = checked.select(
        *[c for c in checked.columns if c not in ("reason", "first", "text")],
        F.when(is_dup, F.lit("duplicate snapshot of this cluster and observed_at"))
        .otherwise(F.col("reason")).alias("reason"),
        F.when(is_dup, F.col("first")).alias("first"),
        F.when(is_dup, F.to_json(F.struct("cluster_id", "observed_at"))).otherwise(F.col("text")).alias("text"),
    )
    valid = checked.where(F.col("reason").isNull()).select(*SNAPSHOT_COLUMNS)
    rejected = checked.where(F.col("reason").isNotNull()).select(*REJECTED_COLUMNS)
    return valid, rejected


def read_jsonl(spark: SparkSession, paths: tuple[str, ...], split_bytes: int = SPLIT_BYTES) -> DataFrame:
    import json

    if getattr(spark, "_journal_lines_registered", False) is False:
        spark.dataSource.register(JournalLines)
        spark._journal_lines_registered = True  # re-registering logs a warning on every replay
    lines = spark.read.format("journal_lines").option("paths", json.dumps(list(paths))) \
        .option("split_bytes", str(split_bytes)).load()
    parsed = lines.select(
        "file", "offset", "line", "text",
        F.from_json("text", SNAPSHOT_JSON_TYPE).alias("snap"),
        # Tells garbage from an object with missing fields without parsing the line a second time:
        # from_json yields a row of nulls for both.
        F.when(F.ltrim("text").startswith("{") & F.rtrim("text").endswith("}"), F.lit("object")).alias("is_object"),
    )
    return _check(parsed)


def read_parquet(spark: SparkSession, paths: tuple[str, ...]) -> DataFrame:
    """Flattened form: one row per volume with the snapshot's fields repeated (a failed poll: no volume)."""
    raw = spark.read.parquet(*paths)
    columns = set(raw.columns)

    def col(name: str, type_: str) -> Column:
        return F.col(name).cast(type_) if name in columns else F.lit(None).cast(type_)

    rows = raw.select(
        F.col("_metadata.file_path").alias("file"),
        F.lit(0).cast("long").alias("offset"),
        (F.col("_metadata.row_index") + 1).alias("line"),
        col("cluster_id", "string").alias("cluster_id"),
        col("observed_at", "string").alias("observed_at"),
        col("status", "string").alias("status"),
        col("brokers", "array<bigint>").alias("brokers"),
        col("fenced_brokers", "array<bigint>").alias("fenced_brokers"),
        F.when(col("broker_id", "bigint").isNotNull() | col("log_dir", "string").isNotNull(), F.struct(
            col("broker_id", "bigint").alias("broker_id"), col("log_dir", "string").alias("log_dir"),
            col("total_bytes", "bigint").alias("total_bytes"),
            col("available_bytes", "bigint").alias("available_bytes"),
            col("error", "string").alias("error"))).alias("volume"),
    )
    # One snapshot per (cluster, observed_at); its location is its first row.
    grouped = rows.groupBy("cluster_id", "observed_at").agg(
        F.min(F.struct("file", "offset", "line")).alias("at"),
        F.first("status", ignorenulls=True).alias("status"),
        F.first("brokers", ignorenulls=True).alias("brokers"),
        F.first("fenced_brokers", ignorenulls=True).alias("fenced_brokers"),
        F.filter(F.collect_list("volume"), lambda v: v.isNotNull()).alias("volumes"),
        F.countDistinct("status").alias("statuses"),
    )
    parsed = grouped.select(
        F.col("at.file").alias("file"), F.col("at.offset").alias("offset"), F.col("at.line").alias("line"),
        F.to_json(F.struct("cluster_id", "observed_at", "status", "brokers", "fenced_brokers")).alias("text"),
        F.when(F.col("statuses") <= 1, F.struct("cluster_id", "observed_at", "status", "brokers",
                                               "fenced_brokers", "volumes")).alias("snap"),
        F.when(F.col("statuses") <= 1, F.lit("object")).alias("is_object"),
    )
    return _check(parsed).withColumn("reason", F.when(
        F.col("reason") == "not a JSON object",
        F.lit("rows of one snapshot disagree on status")).otherwise(F.col("reason")))


def checked(spark: SparkSession, path: str, split_bytes: int = SPLIT_BYTES) -> DataFrame:
    """Every snapshot of every journal file under `path`, parsed, with `reason` set where it is invalid."""
    inputs = find_inputs(path)
    parts = []
    if inputs.jsonl:
        parts.append(read_jsonl(spark, inputs.jsonl, split_bytes))
    if inputs.parquet:
        parts.append(read_parquet(spark, inputs.parquet))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def read(spark: SparkSession, path: str, split_bytes: int = SPLIT_BYTES) -> tuple[DataFrame, DataFrame]:
    """(valid snapshots, rejected rows) of every journal file under `path`, parsed lazily."""
    return _split(checked(spark, path, split_bytes))


def staged(spark: SparkSession, path: str, staging: str) -> tuple[DataFrame, DataFrame]:
    """As read(), but parsed once into Parquet at `staging`: every later pass reads columns, not JSON."""
    checked(spark, path).write.mode("overwrite").parquet(staging)
    return _split(spark.read.parquet(staging))
