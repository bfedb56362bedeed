"""Wall-clock time of the Spark stages a micro-batch ran, read from the driver's status store (works without the UI)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageTime:
    stage_id: int
    tasks: int
    seconds: float  # submission to completion, as the driver saw it
    task_seconds: float  # summed executor run time of its tasks


def _store(spark: Any) -> Any:
    return spark.sparkContext._jsc.sc().statusStore()


def completed_stages(spark: Any, after: int = -1) -> list[StageTime]:
    """Stages with an id above `after` that ran to completion, by id (skipped stages never ran: left out)."""
    sc = spark.sparkContext
    jvm = sc._jvm
    stages = _store(spark).stageList(None, False, False, sc._gateway.new_array(jvm.double, 0),
                                     jvm.java.util.ArrayList())
    out = []
    for i in range(stages.length()):
        s = stages.apply(i)
        if s.stageId() <= after or s.submissionTime().isEmpty() or s.completionTime().isEmpty():
            continue
        seconds = (s.completionTime().get().getTime() - s.submissionTime().get().getTime()) / 1000
        out.append(StageTime(s.stageId(), s.numTasks(), seconds, s.executorRunTime() / 1000))
    return sorted(out, key=lambda t: t.stage_id)


def last_stage_id(spark: Any) -> int:
    """The highest stage id the driver knows of so far (-1 before any)."""
    stages = completed_stages(spark)
    return stages[-1].stage_id if stages else -1
