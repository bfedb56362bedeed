"""`replay` on Spark (JSONL parsed by Spark SQL, Parquet read by the cluster tasks, decided by core/compiled/kernel.py)
equals the reference (core/reference/cache.py + core/reference/decision.py) on random journals, the Parquet ones in each of
journal_strategies.LAYOUTS."""
from __future__ import annotations

import datetime as dt
import json
from typing import Any

from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from pyspark.sql import functions as F

from tests.support.builders import GB, settings
from tests.support.journal_strategies import brokers_on_every_row, fleets
from quota_pipeline.replay import job as replay
from tests.unit.test_cluster_pass import ETA, write_flat
from quota_pipeline.core.reference.decision import decide_all
from quota_pipeline.core.record import stop_of


CLOSEST_TYPE = ("array<struct<broker_id:bigint,log_dir:string,available_bytes:bigint,total_bytes:bigint,"
                "available_ratio:double,headroom_bytes:double,fill_rate_bytes_per_second:double,eta_seconds:double,"
                "top_partitions:array<struct<topic:string,partition:int,size_bytes:bigint>>,reason:string>>")
COMPARED = ("cluster_id", "observed_at", "throttle_factor", "source", "valid_until", "violations",
            "active_log_dirs", "active_brokers", "missing_brokers", "min_available_ratio", "worst_volume",
            "throttled_since", "closest_volumes", "predictive", "stop")


def python_frame(spark, snaps, s):
    """The streaming form's decisions as a DataFrame of the compared replay columns."""
    rows = []
    for sm, d in decide_all(snaps, s):
        w = sm.worst_volume
        rows.append((sm.cluster_id, _naive(sm.observed_at), d.factor, d.source.value, _naive(d.valid_until(s.validity)),
                     sm.violations, sm.active_log_dirs, sm.active_brokers, list(sm.missing_brokers),
                     sm.min_available_ratio,
                     None if w is None else (w.broker_id, w.log_dir, w.available_bytes, w.available_ratio),
                     _naive(d.throttled_since),
                     [(c.broker_id, c.log_dir, c.available_bytes, c.total_bytes, c.available_ratio, c.headroom_bytes,
                       c.fill_rate_bytes_per_second, c.eta_seconds,
                       [(p.topic, p.partition, p.size_bytes) for p in c.top_partitions], c.reason)
                      for c in sm.closest_volumes],
                     None if sm.predictive is None else (sm.predictive.broker_id, sm.predictive.log_dir,
                                                         sm.predictive.eta_seconds, sm.predictive.horizon_seconds),
                     _stop(stop_of(sm, d))))
    schema = ("cluster_id string, observed_at timestamp, throttle_factor double, source string, "
              "valid_until timestamp, violations long, active_log_dirs long, active_brokers long, "
              "missing_brokers array<long>, min_available_ratio double, worst_volume struct<broker_id: long, "
              "log_dir: string, available_bytes: long, available_ratio: double>, throttled_since timestamp, "
              "closest_volumes " + CLOSEST_TYPE + ", predictive struct<broker_id: long, log_dir: string, "
              "eta_seconds: double, horizon_seconds: double>, stop struct<scope: string, topics: array<string>>")
    return spark.createDataFrame(rows, schema)


@hsettings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(fleets(), st.sampled_from(["pin", "last-known", "violate"]), st.sampled_from([None, 15 * GB]),
       st.sampled_from([0, 30, 60]), st.sampled_from(["pin", "expire"]), st.sampled_from([0, 2, 5]),
       st.sampled_from(["jsonl", "parquet", "exported"]), st.sampled_from(ETA))
def test_spark_replay_equals_streaming_decisions(spark, tmp_path_factory, snaps, offline, soft, validity, fenced,
                                                 closest, form, eta):
    s = settings(hard_bytes=5 * GB, soft_bytes=soft, validity_s=validity, offline=offline, fallback=0.3,
                 fenced=fenced, closest=closest, eta=eta)
    work = tmp_path_factory.mktemp("eq")
    if form == "jsonl":
        path = work / "journal.jsonl"
        path.write_text("".join(json.dumps(x.to_json()) + "\n" for x in snaps))
    else:
        if form == "exported":  # failed polls' rows at the end of the file, with the brokers list
            snaps = brokers_on_every_row(snaps)
        path = work / "journal.parquet"
        write_flat(path, snaps, None if form == "parquet" else 7, "sorted" if form == "parquet" else form)
    assert_replay_is_the_reference(spark, spark, s, path, work, snaps)


def assert_replay_is_the_reference(engine: Any, spark: Any, s: Any, path: Any, work: Any, snaps: list) -> None:
    """`replay.run` on `engine` (a SparkSession, or None for the local engine) rejects nothing and decides `snaps`
    exactly as the plain-Python reference does."""
    result = replay.run(engine, s, str(path), str(work / "out.parquet"))
    assert result.rejected == 0
    replayed = spark.read.parquet(str(work / "out.parquet")).select(*COMPARED)
    assert_df_equality(replayed, python_frame(spark, snaps, s), ignore_row_order=True, ignore_nullable=True,
                       transforms=[_cast_counts])


def _cast_counts(df):
    """Replay's count columns are ints or longs depending on the aggregation; compare them as longs."""
    return df.select(*[F.col(c).cast("long").alias(c) if c in ("violations", "active_log_dirs", "active_brokers")
                       else F.col(c).cast("array<long>").alias(c) if c == "missing_brokers"
                       else F.col(c).cast("struct<broker_id: long, log_dir: string, available_bytes: long, "
                                          "available_ratio: double>").alias(c) if c == "worst_volume"
                       else F.col(c) for c in df.columns])


def _stop(stop):
    return None if stop is None else (stop.scope, list(stop.topics) if stop.scope == "topics" else None)


def _naive(t):
    return None if t is None else t.astimezone(dt.timezone.utc).replace(tzinfo=None)
