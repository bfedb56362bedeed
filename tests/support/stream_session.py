"""The streaming job in the test session's Spark, on a thread, its decisions collected instead of published."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from quota_pipeline.core import config as cfg
from quota_pipeline.streaming.query import StreamJob


class CollectingPublisher:
    """The publisher's place: takes what a micro-batch would publish, acknowledges at once."""

    def publish(self, pairs) -> None:
        list(pairs)

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        pass


@contextmanager
def job_in_session(spark, configs: list[cfg.Config], monkeypatch) -> Iterator[list]:
    """The job over `configs` running; yields the list its decision rows are added to, and stops it on leaving."""
    rows: list = []
    job = StreamJob(configs, on_decisions=rows.extend)
    job._publisher = CollectingPublisher()
    monkeypatch.setattr(job, "spark_session", lambda: spark)
    runner = threading.Thread(target=job.run, kwargs={"max_restarts": 0}, daemon=True)
    runner.start()
    try:
        yield rows
    finally:
        job.request_stop()
        runner.join(90)
