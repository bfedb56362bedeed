"""Spark's Python daemon with the job's modules imported before it forks a worker: each worker of the micro-batches
(the polls, the stateful step) starts with pandas, pyarrow, numba, kafka-python and the package in memory instead of
importing them itself, which a job's first micro-batch after a (re)start paid once per worker."""
from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] in ([], ["pyspark.worker"]):  # the workers of tasks; planners and runners start as they were
        import quota_pipeline.kafka.observer  # noqa: F401 - kafka-python, for the polls
        import quota_pipeline.streaming.processor  # noqa: F401 - pandas, pyarrow, numba, the kernel
        import quota_pipeline.streaming.source  # noqa: F401
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
