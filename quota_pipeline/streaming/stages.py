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
    """Stages with an id above `after` that ran to completion, by id (skipped stages never ran: left out). Reads
    the stages one by one from `after` up to the newest: listing every stage the driver retains (up to 1,000, a
    few Java calls each) took longer than a micro-batch at a 1 s interval."""
    store, tracker = _store(spark), spark.sparkContext.statusTracker()
    out = []
    stage_id = after + 1
    while tracker.getStageInfo(stage_id) is not None:  # None: no such stage yet, the newest was the one before
        s = store.lastStageAttempt(stage_id)
        if not s.submissionTime().isEmpty() and not s.completionTime().isEmpty():
            seconds = (s.completionTime().get().getTime() - s.submissionTime().get().getTime()) / 1000
            out.append(StageTime(s.stageId(), s.numTasks(), seconds, s.executorRunTime() / 1000))
        stage_id += 1
    return out
