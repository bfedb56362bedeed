"""What `replay --report` draws, collected from Spark as small pandas frames (bounded whatever the journal's size)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from quota_pipeline.core import policy
from quota_pipeline.core.config import Limits
from quota_pipeline.core.settings import Settings

# Points per cluster in the time charts, and time columns of the heat map: a year of 10 s snapshots is drawn
# from minima per bucket, so a dip shorter than a bucket still shows (only its width is lost).
MAX_POINTS = 4000
HEAT_COLUMNS = 160


@dataclass(frozen=True)
class ReportFrames:
    """Per cluster, times in UTC: `decisions` (observed_at, throttle_factor, fallback, min_available_ratio;
    per bucket the least factor and ratio, fallback if any decision in it was), `worst` (the log dir that came
    closest to the hard limit: broker_id, log_dir, observed_at, available_bytes, available_ratio, offline),
    `heat` (broker_id, observed_at = bucket start, min_ratio, offline readings as 0), `bucket_s` (seconds per
    heat map column)."""

    limits: Limits
    decisions: pd.DataFrame
    worst: pd.DataFrame
    heat: pd.DataFrame
    bucket_s: dict[str, float]


def _bucketed(df: DataFrame, bounds: DataFrame, n: int) -> DataFrame:
    """`df` (cluster_id, t_us, ...) with `bucket`: n equal spans of each cluster's time range."""
    width = F.greatest(F.lit(1.0), (F.col("t1") - F.col("t0")) / F.lit(n))
    return df.join(F.broadcast(bounds), "cluster_id").withColumn(
        "bucket", F.least(F.lit(n - 1), F.floor((F.col("t_us") - F.col("t0")) / width)).cast("int"))


def collect(readings: DataFrame, records: DataFrame, settings: Settings) -> ReportFrames:
    """The report's frames from the readings (spark_reader.flat_volumes) and the decision records of one replay."""
    recs = records.select("cluster_id", F.unix_micros("observed_at").alias("t_us"), "throttle_factor",
                          (F.col("source") == "FALLBACK").alias("fallback"), "min_available_ratio")
    bounds = recs.groupBy("cluster_id").agg(F.min("t_us").alias("t0"), F.max("t_us").alias("t1")).cache()
    decisions = _bucketed(recs, bounds, MAX_POINTS).groupBy("cluster_id", "bucket").agg(
        F.min("t_us").alias("t_us"), F.min("throttle_factor").alias("throttle_factor"),
        F.max(F.col("fallback").cast("int")).cast("boolean").alias("fallback"),
        F.min("min_available_ratio").alias("min_available_ratio"))

    vols = readings.select("cluster_id", "t_us", "broker_id", "log_dir", "available_bytes",
                           policy.available_ratio_col(F.col("available_bytes"), F.col("total_bytes"))
                           .alias("available_ratio"))
    # Closest to the hard limit: by ratio or by bytes, as the limit is written; an offline reading has neither.
    by = "available_ratio" if settings.limits.hard.kind == "ratio" else "available_bytes"
    lowest = vols.where(F.col(by).isNotNull()).groupBy("cluster_id", "broker_id", "log_dir").agg(F.min(by).alias("low"))
    rank = Window.partitionBy("cluster_id").orderBy("low", "broker_id", "log_dir")
    worst_key = lowest.withColumn("r", F.row_number().over(rank)).where("r = 1").select("cluster_id", "broker_id", "log_dir")
    worst = _bucketed(vols.join(F.broadcast(worst_key), ["cluster_id", "broker_id", "log_dir"]), bounds, MAX_POINTS) \
        .groupBy("cluster_id", "broker_id", "log_dir", "bucket").agg(
            F.min("t_us").alias("t_us"), F.min("available_bytes").alias("available_bytes"),
            F.min("available_ratio").alias("available_ratio"),
            F.max(F.col("available_bytes").isNull().cast("int")).cast("boolean").alias("offline"))
    heat = _bucketed(vols, bounds, HEAT_COLUMNS).groupBy("cluster_id", "broker_id", "bucket").agg(
        F.min(F.coalesce("available_ratio", F.lit(0.0))).alias("min_ratio"))
    edges = {r.cluster_id: (r.t0, r.t1) for r in bounds.collect()}
    spans = {c: (t1 - t0) / 1e6 for c, (t0, t1) in edges.items()}
    heat_pd = heat.toPandas()
    # A bucket's start: the cluster's first snapshot plus whole bucket widths (as _bucketed numbers them).
    start = heat_pd["cluster_id"].map(lambda c: edges[c][0])
    width = heat_pd["cluster_id"].map(lambda c: max(1.0, (edges[c][1] - edges[c][0]) / HEAT_COLUMNS))
    heat_pd["observed_at"] = pd.to_datetime(start + heat_pd["bucket"] * width, unit="us", utc=True)
    return ReportFrames(
        limits=settings.limits,
        decisions=_with_time(decisions.drop("bucket").toPandas()),
        worst=_with_time(worst.drop("bucket").toPandas()),
        heat=heat_pd.drop(columns="bucket").sort_values(["cluster_id", "broker_id", "observed_at"]),
        bucket_s={c: s / HEAT_COLUMNS for c, s in spans.items()},
    )


def _with_time(frame: pd.DataFrame) -> pd.DataFrame:
    frame["observed_at"] = pd.to_datetime(frame.pop("t_us"), unit="us", utc=True)
    return frame.sort_values(["cluster_id", "observed_at"]).reset_index(drop=True)
