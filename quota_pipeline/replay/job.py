"""Batch replay: journal files in, one decision record per snapshot out (JSONL or Parquet).

Per-volume work is Spark SQL (journal.py, aggregate.py); only the one-row-per-snapshot summaries
pass through decide.advance, per cluster in observed_at order, inside applyInPandas.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from quota_pipeline.replay import intervals as aggregate
from quota_pipeline.replay import report_frames
from quota_pipeline.replay import sweep as sweeps
from quota_pipeline.journal import lines
from quota_pipeline.journal import spark_reader as journal
from quota_pipeline.core.config import Limit
from quota_pipeline.core.clock import SYSTEM
from quota_pipeline.core.decision import advance
from quota_pipeline.core.record import SCHEMA_VERSION
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import (
    Decision, DecisionSource, SnapshotSummary, Status, epoch_micros, from_epoch_micros, micros,
)

TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
DECISION_SCHEMA = T.StructType([
    T.StructField("cluster_id", T.StringType()),
    T.StructField("seq", T.LongType()),
    T.StructField("throttle_factor", T.DoubleType()),
    T.StructField("source", T.StringType()),
    T.StructField("valid_from_us", T.LongType()),
    T.StructField("throttled_since_us", T.LongType()),
])


def _decide_cluster(settings: Settings):
    """The per-cluster sequential step, closed over the settings for applyInPandas."""
    def run(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.sort_values("seq")
        current: Decision | None = None
        factors, sources, valid_from, since = [], [], [], []
        for row in frame.itertuples(index=False):
            observed_at = from_epoch_micros(int(row.t_us))
            current = advance(current, SnapshotSummary(
                cluster_id=row.cluster_id, observed_at=observed_at, status=Status(row.status),
                active_brokers=int(row.active_brokers), active_log_dirs=int(row.active_log_dirs),
                missing_brokers=tuple(int(b) for b in row.missing_brokers), violations=int(row.violations),
                policy_factor=float(row.policy_factor), complete=bool(row.complete),
                min_available_ratio=None if pd.isna(row.min_available_ratio) else float(row.min_available_ratio)),
                settings)
            factors.append(current.factor)
            sources.append(current.source.value)
            valid_from.append(epoch_micros(current.valid_from))
            since.append(None if current.throttled_since is None else epoch_micros(current.throttled_since))
        return pd.DataFrame({"cluster_id": frame["cluster_id"].values, "seq": frame["seq"].values,
                             "throttle_factor": factors, "source": sources, "valid_from_us": valid_from,
                             "throttled_since_us": pd.array(since, dtype="Int64")})
    return run


def decisions(summaries: DataFrame, settings: Settings, cluster_name: str | None = None,
              decided_at: dt.datetime | None = None) -> DataFrame:
    """Output records (DESIGN.md) as a DataFrame with timestamp columns, sorted by cluster and time."""
    # One row per snapshot, used twice below (decided, then joined back): computed once.
    summaries = summaries.cache()
    # Everything of the summary but the worst volume (a struct pandas would flatten; step 4 ignores it).
    inputs = summaries.select("cluster_id", "seq", F.unix_micros("observed_at").alias("t_us"), "status",
                              "active_brokers", "active_log_dirs", "missing_brokers", "violations",
                              "policy_factor", "complete", "min_available_ratio")
    decided = inputs.groupBy("cluster_id").applyInPandas(_decide_cluster(settings), DECISION_SCHEMA)
    validity_us = micros(settings.validity)
    return summaries.join(decided, ["cluster_id", "seq"]).select(
        F.lit(SCHEMA_VERSION).alias("schema_version"),
        (F.lit(cluster_name) if cluster_name else F.col("cluster_id")).alias("cluster_id"),
        "observed_at",
        (F.lit(decided_at).cast("timestamp") if decided_at else F.current_timestamp()).alias("decided_at"),
        "throttle_factor", "source",
        F.when(F.col("source") != DecisionSource.FALLBACK.value,
               F.timestamp_micros(F.col("valid_from_us") + validity_us)).alias("valid_until"),
        "status", "active_brokers", "active_log_dirs", "missing_brokers",
        F.struct(_limit_col(settings.limits.hard).alias("hard"),
                 _limit_col(settings.limits.soft).alias("soft")).alias("limit"),
        "violations", "worst_volume", "min_available_ratio",
        F.timestamp_micros("throttled_since_us").alias("throttled_since"), "closest_volumes",
    )


def _limit_col(limit: Limit | None):
    """A limit as the record holds it: bytes as an integer, a ratio as a double (Limit.to_json)."""
    if limit is None:
        return F.lit(None).cast("struct<type:string,value:double>")
    value = F.lit(int(limit.value)).cast("long") if limit.kind == "bytes" else F.lit(float(limit.value))
    return F.struct(F.lit(limit.type_name).alias("type"), value.alias("value"))


def as_json_columns(records: DataFrame) -> DataFrame:
    """Timestamps as the record's ISO-8601 strings (model.format_time)."""
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
    sweep: list[sweeps.SweepRow] = field(default_factory=list)
    sweep_path: str | None = None
    report: report_frames.ReportFrames | None = None


def run(spark: SparkSession, settings: Settings, input_path: str, output: str, strict: bool = False,
        cluster_name: str | None = None, sweep: sweeps.Sweep | None = None, report: bool = False) -> ReplayResult:
    """Decisions for every snapshot under `input_path` into `output`; with `sweep`, also what each of its settings
    does over the same read (OUT.sweep.json); with `report`, the frames report.render draws."""
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f"{out.name}.staging-{uuid.uuid4().hex}"  # Spark skips dot-names
    try:
        return _run(spark, settings, input_path, out, str(staging), strict, cluster_name, sweep, report)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        # The run cached its snapshot numbering and summaries; a session that replays again (tests, --sweep)
        # would otherwise keep every earlier run's blocks on the heap.
        spark.catalog.clearCache()


def _run(spark: SparkSession, settings: Settings, input_path: str, out: Path, staging: str, strict: bool,
         cluster_name: str | None, sweep: sweeps.Sweep | None, report: bool) -> ReplayResult:
    output = str(out)
    # JSON is parsed once: the rejects, the snapshot numbering and the readings all read the staged columns.
    snaps, rejected = journal.staged(spark, input_path, staging)
    rejected_path = Path(str(out) + ".rejected")
    rejected_count, first = 0, []
    with rejected_path.open("w", encoding="utf-8") as fh:
        for r in lines.rejections(rejected):
            fh.write(json.dumps(r) + "\n")
            rejected_count += 1
            if len(first) < 5:
                first.append(r)
    if not rejected_count:
        rejected_path.unlink()
    elif strict:
        return ReplayResult(0, rejected_count, first, output, str(rejected_path))
    # A sweep's limits are judged in the same aggregation as the replay's own (the cache does not depend on them);
    # decisions() caches the summaries, and the sweep below reads that cache (Spark matches it by plan).
    summaries = aggregate.summaries(snaps, settings, sweeps.limits_for(sweep, settings))
    records = decisions(summaries, settings, cluster_name, decided_at=SYSTEM.now()).repartition(1) \
        .sortWithinPartitions("cluster_id", "observed_at")
    if output.endswith(".jsonl"):
        write_jsonl(as_json_columns(records), out)
    else:
        records.write.mode("overwrite").parquet(output)
    count = spark.read.parquet(output).count() if not output.endswith(".jsonl") else _count_lines(out)
    result = ReplayResult(count, rejected_count, first, output, str(rejected_path) if rejected_count else None)
    if sweep is not None:
        result.sweep = sweeps.decide(sweeps.aggregations(snaps, settings, summaries, sweep), sweep)
        sweep_path = Path(str(out) + ".sweep.json")
        sweep_path.write_text(json.dumps([r.to_json() for r in result.sweep], indent=1) + "\n", encoding="utf-8")
        result.sweep_path = str(sweep_path)
    if report:
        written = spark.read.parquet(output) if not output.endswith(".jsonl") else \
            spark.read.json(output).withColumn("observed_at", F.to_timestamp("observed_at"))
        result.report = report_frames.collect(snaps, written, settings)
    return result


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


def summary_table(records: DataFrame) -> list[dict]:
    """Per cluster: snapshots, time throttled (by violation / by fallback) and throttle episodes."""
    by_time = Window.partitionBy("cluster_id").orderBy("observed_at")
    spans = records.select(
        "cluster_id", "observed_at", "throttle_factor", "source", "violations", "status",
        (F.unix_micros(F.lead("observed_at").over(by_time)) - F.unix_micros("observed_at")).alias("span_us"),
        F.lag("throttle_factor").over(by_time).alias("prev_factor"),
    )
    throttled = F.col("throttle_factor") < 1.0
    rows = spans.groupBy("cluster_id").agg(
        F.count("*").alias("snapshots"),
        F.concat_ws(" .. ", F.date_format(F.min("observed_at"), "yyyy-MM-dd HH:mm"),
                    F.date_format(F.max("observed_at"), "yyyy-MM-dd HH:mm")).alias("period"),
        (F.sum(F.when(throttled & (F.col("source") != "FALLBACK"), F.col("span_us"))) / 1e6).alias("throttled_s"),
        (F.sum(F.when(throttled & (F.col("source") == "FALLBACK"), F.col("span_us"))) / 1e6).alias("fallback_s"),
        F.sum(F.when(throttled & (F.coalesce("prev_factor", F.lit(1.0)) >= 1.0), 1).otherwise(0)).alias("episodes"),
        F.max("violations").alias("max_violations"),
        F.sum(F.when(F.col("status") != "SUCCESS", 1).otherwise(0)).alias("failed_polls"),
    ).orderBy("cluster_id")
    return [r.asDict() for r in rows.collect()]
