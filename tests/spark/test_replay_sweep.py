"""`replay --sweep`: every setting of a sweep gives what a plain replay with that setting alone gives; bad input is
one error line and exit code 2."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.core.settings import Settings
from harness import synthetic_journals
from quota_pipeline.replay import job
from quota_pipeline.replay import sweep as sweeps

P = "client.quota.callback.static."
START = dt.datetime(2026, 11, 21, 8, tzinfo=dt.timezone.utc)


def write_conf(path: Path, **extra: str) -> Path:
    props = {P + "storage.per.volume.limit.min.available.ratio": "0.05",
             P + "throttle.factor.validity.duration": "PT3M", P + "throttle.factor.fallback": "0.5", **extra}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    """The bundled story (a disk filling past 5 % and cleaned up, a broker left out, calls timing out past the
    validity, an offline log dir, a fenced broker): two clusters, 400 snapshots."""
    path = tmp_path_factory.mktemp("sweep") / "journal.jsonl"
    with path.open("w") as fh:
        synthetic_journals.write_jsonl(synthetic_journals.example_story(START), fh)
    return path


def plain(spark, conf: Path, journal: Path, out: Path) -> dict[str, dict]:
    """What a plain replay with this configuration alone reports per cluster (the summary the CLI prints)."""
    settings = Settings.of(cfg.load(conf, require_admin=False))
    result = job.run(spark, settings, str(journal), str(out))
    summary = {r["cluster_id"]: r for r in result.clusters}
    # The summary the tasks compute equals the same figures computed by Spark from the written records.
    reference = {r["cluster_id"]: r for r in summary_table(spark.read.parquet(str(out)))}
    for cluster, r in reference.items():
        assert {k: summary[cluster][k] for k in ("snapshots", "throttled_s", "fallback_s", "episodes",
                                                 "max_violations", "failed_polls")} == \
            {k: r[k] for k in ("snapshots", "throttled_s", "fallback_s", "episodes", "max_violations",
                               "failed_polls")}
    return summary


@pytest.mark.parametrize("key,values", [
    ("storage.per.volume.limit.min.available.ratio", ("0.01", "0.2")),
    ("throttle.factor.validity.duration", ("PT1M", "PT10M")),
])
def test_each_sweep_row_is_the_plain_replay_of_its_setting(spark, journal, tmp_path, key, values):
    conf = write_conf(tmp_path / "base.properties")
    base = cfg.load(conf, require_admin=False)
    sweep = sweeps.parse(f"{key}={','.join(values)}", base)
    result = job.run(spark, Settings.of(base), str(journal), str(tmp_path / "swept.parquet"), sweep=sweep)
    rows = {(r.cluster_id, r.value): r for r in result.sweep}
    assert len(rows) == 2 * len(values)
    seen = set()
    for value in values:
        alone = plain(spark, write_conf(tmp_path / f"{value}.properties", **{P + key: value}), journal,
                      tmp_path / f"plain-{value}.parquet")
        for cluster, summary in alone.items():
            row = rows[cluster, value]
            assert row.snapshots == summary["snapshots"]
            assert row.throttled_s == pytest.approx(summary["throttled_s"] or 0.0)
            assert row.episodes == summary["episodes"]
            seen.add((row.throttled_s, row.episodes, row.fallback_s))
    assert len(seen) > 2, "the values chosen must change the outcome, or the test proves nothing"
    written = json.loads(Path(result.sweep_path).read_text())
    assert [(r["cluster_id"], r["value"]) for r in written] == [(r.cluster_id, r.value) for r in result.sweep]


def test_a_fallback_sweep_changes_only_the_fallback_time(spark, journal, tmp_path):
    base = cfg.load(write_conf(tmp_path / "base.properties"), require_admin=False)
    sweep = sweeps.parse("throttle.factor.fallback=1.0,0.0", base)
    result = job.run(spark, Settings.of(base), str(journal), str(tmp_path / "out.jsonl"), sweep=sweep)
    east = {r.value: r for r in result.sweep if r.cluster_id == "prod-east"}
    assert east["1.0"].fallback_s == east["0.0"].fallback_s > 0
    # At fallback 1.0 the timeouts are not a throttle; at 0.0 they add one (or lengthen one).
    assert east["0.0"].longest_episode_s > east["1.0"].longest_episode_s or east["0.0"].episodes > east["1.0"].episodes


def test_episode_metrics_count_runs_and_spans():
    t = np.array([0, 10, 20, 30, 40, 50, 60], dtype=np.int64) * 1_000_000
    factor = np.array([1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 1.0])
    fallback = np.array([False, False, True, False, False, False, False])
    ratio = np.array([0.3, 0.01, np.nan, 0.2, 0.04, 0.15, np.nan])
    headroom = np.array([5.0, -3.0, np.nan, 2.0, 1.0, 4.0, np.nan])
    written = np.array([0.0, 100, 100, 100, 100, 100, 100])
    m = sweeps.episode_metrics(t, factor, fallback, ratio, headroom, written)
    # Stopped: factor 0 outside the fallback (10 s twice); deferred: (1 - factor) x the growth until the next snapshot
    # (100 + 50 + 100), the fallback's factor included: the brokers apply it.
    assert m == {"throttled_s": 20.0, "episodes": 2, "longest_episode_s": 20.0, "fallback_s": 10.0,
                 "min_ratio_unthrottled": 0.15, "stopped_s": 20.0, "least_headroom_bytes": -3.0,
                 "deferred_bytes": 250.0}


@pytest.mark.parametrize("spec,problem", [
    ("storage.check.interval=PT1M,PT2M", "cannot be swept"),
    ("nonsense", "cannot be swept"),
    ("throttle.factor.fallback=", "give comma-separated values"),
    ("throttle.factor.fallback=0.5,abc", "throttle.factor.fallback: must be a number (got abc)"),
    ("throttle.factor.fallback=0.5,1.5", "must be between 0.0 and 1.0 (got 1.5)"),
    ("throttle.factor.validity.duration=PT1M,P1M", "years and months have no fixed length"),
    ("storage.per.volume.limit.min.available.ratio=0.01,0.2",
     "storage.per.volume.limit.min.available.ratio=0.2: " + P + "storage.per.volume.soft.limit.min.available.ratio: "
     "the soft limit must leave more space than the hard limit"),
    ("throttle.factor.fallback=0.5,0.5", "distinct values"),
])
def test_bad_sweeps_are_one_error_line_and_exit_2(tmp_path, capsys, spec, problem):
    conf = write_conf(tmp_path / "c.properties", **{P + "storage.per.volume.soft.limit.min.available.ratio": "0.1"})
    (tmp_path / "j.jsonl").write_text("{}\n")
    code = main(["replay", "--config", str(conf), "--input", str(tmp_path / "j.jsonl"), "--output", str(tmp_path / "o.jsonl"),
                 "--sweep", spec])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: --sweep: ") and problem in err, err
    assert "Traceback" not in err


def test_a_limit_of_the_other_kind_replaces_the_configured_one(tmp_path):
    base = cfg.load(write_conf(tmp_path / "c.properties"), require_admin=False)
    sweep = sweeps.parse("storage.per.volume.limit.min.available.bytes=1000,2000", base)
    assert [s.limits.hard for s in sweep.settings] == [cfg.Limit("bytes", 1000), cfg.Limit("bytes", 2000)]


def summary_table(records: DataFrame) -> list[dict]:
    """The CLI's per-cluster summary computed by Spark from the written records: the reference for the tasks'."""
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
