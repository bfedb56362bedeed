"""The micro-batch lines' Spark stages (--log-batches): the stages a batch ran, read from the driver's status store."""
from __future__ import annotations

from quota_pipeline.streaming.stages import completed_stages


def test_the_stages_after_a_known_one_are_those_of_the_jobs_since(spark):
    spark.range(10).collect()
    before = completed_stages(spark)
    newest = before[-1].stage_id
    # A shuffle: two stages, each with its tasks and a duration.
    spark.range(1000).repartition(3).selectExpr("id % 2 as k").groupBy("k").count().collect()
    after = completed_stages(spark, newest)
    assert after and all(s.stage_id > newest for s in after)
    assert [s.stage_id for s in after] == sorted(s.stage_id for s in after)
    assert all(s.tasks >= 1 and s.seconds >= 0 for s in after)
    assert completed_stages(spark, after[-1].stage_id) == []  # nothing ran since
