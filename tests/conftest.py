"""Shared fixtures: one SparkSession for the whole test session (local[2], 2 shuffle partitions, no UI)."""
from __future__ import annotations

import os
import sys
import time

import pytest

from quota_pipeline.session import JAVA_HINT, java_available


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    if not java_available():
        pytest.exit(JAVA_HINT, returncode=3)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark hands timestamps to Python in the process's local zone; the tests compare in UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()
    from quota_pipeline.session import get_session

    session = get_session("quota-pipeline-tests", master="local[2]", conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        # The session runs every test's queries (streaming state, replays, Kafka sinks): 1 GiB ran out in CI.
        "spark.driver.memory": "2g",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
    })
    yield session
    session.stop()


# The README's command runs two pytest-xdist workers with `--dist loadfile`: a file's tests stay on one worker, so
# its module fixtures (a streaming story, a broker) run once; each worker starts the session-scoped real-Kafka
# clusters it needs. Most of the suite waits on processes and intervals, not on the CPU.


# Real Apache Kafka clusters (KAFKA_HOME), started on first use: real_kafka, real_kafka3, real_kafka_tmpfs.
from tests.support.realkafka_fixtures import real_kafka, real_kafka3, real_kafka_tmpfs  # noqa: E402,F401
