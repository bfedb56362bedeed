"""Batch replay: journal files in, one decision record per snapshot out (JSONL or Parquet).

One task per cluster reads its cluster's rows with pyarrow in time chunks (replay/cluster_files.py) and decides
them (core/cluster_pass.py over core/kernel.py), so no Python runs per volume row and memory is bounded by a chunk.
Spark schedules the tasks (`spark` given); without it (`spark` None: no JVM to start, no first job) a pool of this
host's processes runs the very same tasks. JSONL (tick files too) is parsed, checked and staged as flattened Parquet
first: by Spark SQL (journal/spark_reader.py) with Spark, in this process (replay/local_jsonl.py) without; Parquet
journals (the job's compacted periods, exports) are read as they are. The report's frames (replay/report_frames.py)
are gathered from the files with pyarrow on either engine.
"""
from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import shutil
import uuid
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from quota_pipeline.core.clock import SYSTEM
from quota_pipeline.core.config import Limit
from quota_pipeline.core.record import SCHEMA_VERSION
from quota_pipeline.core.settings import Settings
from quota_pipeline.journal.inputs import Inputs, find_inputs
from quota_pipeline.replay import records_json, sweep as sweeps
from quota_pipeline.core.model import epoch_micros
from quota_pipeline.core.compiled.record_batch import RECORD, UTC_US
from quota_pipeline.replay.cluster_files import ClusterFiles, Task

if TYPE_CHECKING:  # Spark is imported where it runs: a replay without it starts sooner
    from pyspark.sql import DataFrame, SparkSession

    from quota_pipeline.replay import report_frames

TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
# Below this many rows the clusters are decided one after another in this process: a spawned worker takes seconds
# to import and load the compiled kernel, more than such a journal takes to decide.
IN_PROCESS_ROWS = 1_000_000


def as_json_columns(records: DataFrame) -> DataFrame:
    """Timestamps as the record's ISO-8601 strings (model.format_time)."""
    from pyspark.sql import functions as F

    out = records
    for name in ("observed_at", "decided_at", "valid_until", "throttled_since"):
        out = out.withColumn(name, F.date_format(name, TIME_FORMAT))
    return out


@dataclass
class ReplayResult:
    records: int
    rejected: int
    first_rejections: list[dict]
    output: str
    rejected_path: str | None
    clusters: list[dict] = field(default_factory=list)  # per cluster: sweep.cluster_summary and its cluster_id
    sweep: list[sweeps.SweepRow] = field(default_factory=list)
    sweep_path: str | None = None
    report: report_frames.ReportFrames | None = None


def run(spark: SparkSession | None, settings: Settings, input_path: str, output: str, strict: bool = False,
        cluster_name: str | None = None, sweep: sweeps.Sweep | None = None, report: bool = False) -> ReplayResult:
    """Decisions for every snapshot under `input_path` into `output`; with `sweep`, also what each of its settings
    does over the same read (OUT.sweep.json); with `report`, the frames report.render draws. `spark` None: the
    clusters' tasks run in this host's processes."""
    inputs = find_inputs(input_path)  # listed once: every Parquet footer is read
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f"{out.name}.staging-{uuid.uuid4().hex}"  # Spark skips dot-names
    try:
        return _run(spark, settings, inputs, out, staging, strict, cluster_name, sweep, report)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run(spark: SparkSession | None, settings: Settings, inputs: Inputs, out: Path, staging: Path, strict: bool,
         cluster_name: str | None, sweep: sweeps.Sweep | None, report: bool) -> ReplayResult:
    output = str(out)
    files, rejections = _stage(spark, inputs, staging)
    swept = list(sweep.settings) if sweep else []
    side, parts = _decide(spark, plan_tasks(files), settings, swept, staging, cluster_name)
    # The tasks find the rejects while the records are written: they are moved into place only when wanted
    # (under --strict a rejected line leaves an earlier output as it was).
    aside = parts
    if output.endswith(".jsonl"):
        aside = staging / "output.jsonl"
        if spark is None:
            records_json.write(sorted(parts.glob("part-*.parquet")), aside, merged=bool(cluster_name))
        else:
            write_jsonl(as_json_columns(spark.read.parquet(str(parts)).orderBy("cluster_id", "observed_at")), aside)
    outcomes = [json.loads(f.read_text()) for f in sorted(side.glob("*.json"))]
    rejections = _write_rejections(rejections + _task_rejections(outcomes), Path(output + ".rejected"))
    first = rejections[:5]
    rejected_path = output + ".rejected" if rejections else None
    if rejections and strict:
        return ReplayResult(0, len(rejections), first, output, rejected_path)
    frames = None
    if report:  # from the part files, before they are moved into place (a .jsonl OUT holds them no more)
        from quota_pipeline.replay import report_frames

        frames = report_frames.collect(files, sorted(parts.glob("part-*.parquet")), settings)
    _remove(out)
    aside.rename(out)
    count = sum(o["snapshots"] for o in outcomes)
    result = ReplayResult(count, len(rejections), first, output, rejected_path)
    result.clusters = [{"cluster_id": cluster_name or o["cluster_id"], **o["summary"]} for o in outcomes
                       if o["cluster_id"] and o["snapshots"]]
    if sweep is not None:
        result.sweep = sorted((sweeps.SweepRow(**row) for o in outcomes for row in _sweep_rows(o, sweep)),
                              key=lambda r: (r.cluster_id, sweep.values.index(r.value)))
        sweep_path = Path(output + ".sweep.json")
        sweep_path.write_text(json.dumps([r.to_json() for r in result.sweep], indent=1) + "\n", encoding="utf-8")
        result.sweep_path = str(sweep_path)
    result.report = frames
    return result


def _stage(spark: SparkSession | None, inputs: Inputs, staging: Path) -> tuple[list[str], list[dict]]:
    """The flattened Parquet files to decide and the rejections found on the way: JSON is parsed and checked once
    (by Spark, or in this process without it), and its valid snapshots go on as flattened Parquet under `staging`."""
    files = [f for group in inputs.parquet for f in group]
    rejections = [{"file": f, "line": 0, "reason": why, "text": None} for f, why in inputs.unreadable]
    if inputs.jsonl and spark is None:
        from quota_pipeline.replay import local_jsonl

        staged, rejected = local_jsonl.stage(inputs.jsonl, staging / "jsonl")
        files.extend(staged)
        rejections.extend(rejected)
    elif inputs.jsonl:
        from quota_pipeline.journal import lines, spark_reader as journal

        valid, rejected = journal.split(journal.read_jsonl(spark, inputs.jsonl), where=True)
        rejections.extend(lines.rejections(rejected))
        flat = str(staging / "jsonl")
        journal.flatten(valid).write.mode("overwrite").parquet(flat)
        files.extend(sorted(str(f) for f in Path(flat).glob("*.parquet")))
    return files, rejections


def _decide(spark: SparkSession | None, tasks: list[Task], settings: Settings, swept: list[Settings],
            staging: Path, cluster_name: str | None) -> tuple[Path, Path]:
    """(outcomes directory, records directory) once every cluster task ran. Task i writes its cluster's records,
    in time order, as part file i with pyarrow. Spark schedules the tasks and carries only their counts, no record
    passes through the JVM; without Spark, up to one process per core runs them (one cluster, or a journal of fewer than IN_PROCESS_ROWS rows: this process)."""
    side = staging / "tasks"
    side.mkdir(parents=True, exist_ok=True)
    parts = staging / "records"
    parts.mkdir(parents=True)
    plan = ClusterTasks(tuple(t.to_json() for t in tasks), settings, tuple(swept), str(side), str(parts),
                        cluster_name, SYSTEM.now())
    n = max(1, len(tasks))
    if spark is not None:
        spark.range(0, n, numPartitions=n).mapInArrow(plan.map_in_arrow, "n long, snapshots long").collect()
    elif n == 1 or sum(pq.ParquetFile(f).metadata.num_rows for t in tasks for f in t.files) < IN_PROCESS_ROWS:
        for i in range(n):
            plan.decide(i)
    else:
        # spawn: a forked child of a process whose pyarrow threads ran can hang on their locks.
        with ProcessPoolExecutor(min(n, os.cpu_count() or 1), mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(plan.decide, range(n)))
    return side, parts


def _task_rejections(outcomes: list[dict]) -> list[dict]:
    """The tasks' rejections with line numbers in their source files (a duplicate names its first's line too)."""
    counted = []

    def numbers(file: str, offset: int, line: int) -> int:
        if offset == 0:  # a whole file's line (Parquet rows, JSONL read without Spark): numbered already
            return line
        if not counted:  # a split of Spark's JSONL reader: its module, and Spark's, are loaded by then
            from quota_pipeline.journal import lines

            counted.append(lines.LineNumbers())
        return counted[0](file, offset, line)

    out = []
    for o in outcomes:
        for r in o["rejected"]:
            reason = r["reason"]
            if r["first"]:
                first = r["first"]
                reason += f" (first at {first['file']}:{numbers(first['file'], first['offset'], first['line'])})"
            out.append({"file": r["file"], "line": numbers(r["file"], r["offset"], r["line"]),
                        "reason": reason, "text": r["text"]})
    return out


def _write_rejections(rejections: list[dict], path: Path) -> list[dict]:
    """The rejections sorted by file and line, written to `path` (one JSON line each; no file when none)."""
    rejections = sorted(rejections, key=lambda r: (r["file"], r["line"]))
    if rejections:
        with path.open("w", encoding="utf-8") as fh:
            for r in rejections:
                fh.write(json.dumps(r) + "\n")
    elif path.exists():
        path.unlink()
    return rejections


def plan_tasks(files: list[str]) -> list[Task]:
    """One task per cluster with the files that hold its rows (read from the cluster_id column alone), and one
    for rows without a cluster id, if any."""
    holders: dict[str | None, list[str]] = {}
    for f in files:
        if "cluster_id" not in pq.ParquetFile(f).schema_arrow.names:
            holders.setdefault(None, []).append(f)
            continue
        ids = pq.read_table(f, columns=["cluster_id"], read_dictionary=["cluster_id"]).column("cluster_id")
        for c in {c for chunk in ids.chunks for c in chunk.dictionary.to_pylist()}:  # no copy of the indices
            holders.setdefault(c or None, []).append(f)
        if ids.null_count:
            holders.setdefault(None, []).append(f)
    return [Task(c, tuple(dict.fromkeys(fs))) for c, fs in sorted(holders.items(), key=lambda kv: kv[0] or "")]


@dataclass(frozen=True)
class ClusterTasks:
    """Replay's tasks: task n decides its cluster into `parts`/part-n.parquet and leaves its rejects, summary and
    sweep in `side`/n.json. Picklable: Spark's workers or this host's processes run them."""

    tasks: tuple[str, ...]
    settings: Settings
    swept: tuple[Settings, ...]
    side: str
    parts: str
    cluster_name: str | None
    decided_at: dt.datetime

    def decide(self, n: int) -> int:
        """Task n run: its cluster's snapshots decided and written; how many."""
        p = ClusterFiles(Task.from_json(self.tasks[n]) if n < len(self.tasks) else Task("", ()), self.settings,
                         self.swept)
        schema = record_schema(self.settings)
        with pq.ParquetWriter(str(Path(self.parts) / f"part-{n:05d}.parquet"), schema, compression="zstd") as writer, \
                ThreadPoolExecutor(1, thread_name_prefix="write") as written:
            pending = None  # a chunk's records are compressed and written while the next chunk is decided
            for decided in p.batches():
                batch = complete(decided, self.settings, self.cluster_name, self.decided_at, schema)
                if pending is not None:
                    pending.result()
                pending = written.submit(writer.write_batch, batch)
            if pending is not None:
                pending.result()
        o = p.outcome
        t, failed, factor, fallback, violations, _, _ = o.series(0)
        written = o.written()
        sweep = []
        for i in range(1, len(self.swept) + 1):
            _, _, factor_i, fallback_i, _, ratio_i, headroom_i = o.series(i)
            sweep.append(sweeps.episode_metrics(t, factor_i, fallback_i, ratio_i, headroom_i, written))
        (Path(self.side) / f"{n:06d}.json").write_text(json.dumps({
            "cluster_id": p.task.cluster_id, "snapshots": o.snapshots, "rejected": o.rejected,
            "sweep": sweep, "summary": sweeps.cluster_summary(t, factor, fallback, violations, failed)}))
        return o.snapshots

    def map_in_arrow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The mapInArrow function over spark.range: each id's task run."""
        for batch in batches:
            for n in batch.column("id").to_pylist():
                yield pa.RecordBatch.from_pydict({"n": [n], "snapshots": [self.decide(n)]})


def _limit_type(limit: Limit | None) -> pa.DataType:
    value = pa.int64() if limit is not None and limit.kind == "bytes" else pa.float64()
    return pa.struct([("type", pa.string()), ("value", value)])


def record_schema(settings: Settings) -> pa.Schema:
    """The output record (DESIGN.md) as Arrow: cluster_pass.RECORD with the run's constant columns in place."""
    fields = list(RECORD)
    at = {f.name: i for i, f in enumerate(fields)}
    fields.insert(at["cluster_id"], pa.field("schema_version", pa.int32()))
    fields.insert(at["observed_at"] + 2, pa.field("decided_at", UTC_US))
    limit = pa.struct([("hard", _limit_type(settings.limits.hard)), ("soft", _limit_type(settings.limits.soft))])
    fields.insert([f.name for f in fields].index("violations"), pa.field("limit", limit))
    return pa.schema(fields)


def complete(decided: pa.RecordBatch, settings: Settings, cluster_name: str | None, decided_at: dt.datetime,
             schema: pa.Schema) -> pa.RecordBatch:
    """A task's records with the columns every record of the run shares."""
    n = decided.num_rows
    limit_type = schema.field("limit").type

    def limit(l: Limit | None, type_: pa.DataType) -> pa.Array:
        if l is None:
            return pa.nulls(n, type_)
        value = int(l.value) if l.kind == "bytes" else float(l.value)
        return pa.array([{"type": l.type_name, "value": value}] * n, type_)

    constant = {
        "schema_version": pa.array(np.full(n, SCHEMA_VERSION, np.int32)),
        "decided_at": pa.array(np.full(n, epoch_micros(decided_at), np.int64), UTC_US),
        "limit": pa.StructArray.from_arrays([limit(settings.limits.hard, limit_type.field("hard").type),
                                             limit(settings.limits.soft, limit_type.field("soft").type)],
                                            fields=list(limit_type)),
    }
    if cluster_name:
        constant["cluster_id"] = pa.array([cluster_name] * n, pa.string())
    return pa.RecordBatch.from_arrays([constant[f.name] if f.name in constant else decided.column(f.name)
                                       for f in schema], schema=schema)


def _sweep_rows(outcome: dict, sweep: sweeps.Sweep) -> Iterator[dict]:
    if outcome["cluster_id"] is None or not outcome["snapshots"]:
        return
    for value, metrics in zip(sweep.values, outcome["sweep"]):
        yield {"cluster_id": outcome["cluster_id"], "key": sweep.key, "value": value,
               "snapshots": outcome["snapshots"], **metrics}


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def write_jsonl(records: DataFrame, target: Path) -> None:
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    records.write.option("ignoreNullFields", "false").mode("overwrite").json(str(tmp))
    with target.open("wb") as out:
        for part in sorted(tmp.glob("part-*")):
            with part.open("rb") as fh:
                shutil.copyfileobj(fh, out)
    shutil.rmtree(tmp, ignore_errors=True)


def _count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)
