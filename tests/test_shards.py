"""The job's state groups: a shard per state partition, a cluster always in the same shard, each decided alone."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from pyspark.sql import functions as F

from quota_pipeline.streaming import shards, source
from quota_pipeline.streaming.processor import DecisionProcessor
from tests.support.builders import GB, MemoryHandle, ok, settings, vol


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_each_shard_runs_in_its_own_partition(spark, n):
    """Spark hash-partitions the grouping values itself: shard i lands on partition i, so no task gets two."""
    keys = shards.keys(n)
    placed = spark.createDataFrame([(k,) for k in keys], "k int").select(F.pmod(F.hash("k"), F.lit(n))).collect()
    assert [r[0] for r in placed] == list(range(n))


def test_a_cluster_keeps_its_shard_and_the_fleet_is_spread(spark):
    ids = [f"cluster-{i}" for i in range(200)]
    frame = spark.createDataFrame([(c,) for c in ids], "cluster_id string")
    first = {r.cluster_id: r.shard for r in frame.select("cluster_id", shards.column(4)).collect()}
    again = {r.cluster_id: r.shard for r in frame.select("cluster_id", shards.column(4)).collect()}
    assert first == again
    counts = pd.Series(first).value_counts()
    assert sorted(counts.index) == sorted(shards.keys(4)) and counts.min() > 25


def test_a_new_checkpoint_is_given_its_shards_for_good(tmp_path):
    assert shards.layout(str(tmp_path / "ckpt"), 2) == shards.Layout(2)
    assert json.loads((tmp_path / "ckpt" / shards.LAYOUT_FILE).read_text()) == {"shards": 2}
    # Restarted on a machine with more cores: a cluster's shard must not move, or its state would be left behind.
    assert shards.layout(str(tmp_path / "ckpt"), 8) == shards.Layout(2)


def test_a_checkpoint_from_before_shards_keeps_a_group_per_cluster(tmp_path):
    (tmp_path / "ckpt" / "query" / "offsets").mkdir(parents=True)
    (tmp_path / "ckpt" / "query" / "offsets" / "0").write_text("v1\n{}\n{}\n")
    assert shards.layout(str(tmp_path / "ckpt"), 2) == shards.Layout(None)
    assert not (tmp_path / "ckpt" / shards.LAYOUT_FILE).exists()


@pytest.mark.parametrize("text", ["", "{", '{"shards": 0}', '{"shards": "2"}', '{"shards": true}', "[]"])
def test_a_layout_file_not_written_by_the_job_is_refused_in_one_line(tmp_path, text):
    (tmp_path / shards.LAYOUT_FILE).write_text(text)
    with pytest.raises(shards.LayoutError) as err:
        shards.layout(str(tmp_path), 2)
    assert "\n" not in str(err.value) and "start a new checkpoint" in str(err.value)


def _frame(*snapshots: tuple[str, int, object]) -> pd.DataFrame:
    rows = [r for name, tick, snap in snapshots for r in source.snapshot_rows(name, tick, snap)]
    return pd.DataFrame(rows, columns=[f.split()[0] for f in source.ROW_SCHEMA.split(", ")])


def _decide(processor: DecisionProcessor, key: tuple, frame: pd.DataFrame) -> list[dict]:
    out = [json.loads(v) for f in processor.handleInputRows(key, iter([frame]), None) for v in f["value"]]
    for record in out:
        record.pop("decided_at")
    return out


def test_the_clusters_of_one_shard_are_decided_each_from_its_own_state():
    s = settings(hard_bytes=5 * GB)
    full, fine = vol(1, 2 * GB), vol(1, 50 * GB)
    together = DecisionProcessor({"a": s, "b": s}, {"a": "a", "b": "b"})
    together.init(MemoryHandle())
    alone = {name: DecisionProcessor({name: s}, {name: name}) for name in ("a", "b")}
    for p in alone.values():
        p.init(MemoryHandle())
    batches = [(("a", 0, ok(0, full, cluster="id-a")), ("b", 0, ok(0, fine, cluster="id-b"))),
               (("b", 1, ok(10, full, cluster="id-b")), ("a", 1, ok(10, fine, cluster="id-a"))),
               (("a", 2, ok(20, fine, cluster="id-a")),)]
    got, expected = [], []
    for batch in batches:
        got += _decide(together, (5,), _frame(*batch))
        for snapshot in batch:
            expected += _decide(alone[snapshot[0]], (5,), _frame(snapshot))
    key = lambda r: (r["cluster_id"], r["observed_at"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert [(r["cluster_id"], r["throttle_factor"]) for r in sorted(got, key=key)] == [
        ("a", 0.0), ("a", 1.0), ("a", 1.0), ("b", 1.0), ("b", 0.0)]
