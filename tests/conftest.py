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


REAL_KAFKA_FIXTURES = {"real_kafka", "real_kafka3", "real_kafka_tmpfs"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """With pytest-xdist (`-n 2 --dist loadgroup`, the README's command) a file's tests stay on one worker, so its
    module fixtures (a streaming story, a broker) run once, and every real-Kafka test shares one worker, so the
    session's Kafka clusters start once. Most of the suite waits on processes and intervals, not on the CPU."""
    for item in items:
        real = item.get_closest_marker("realkafka") or REAL_KAFKA_FIXTURES & set(getattr(item, "fixturenames", ()))
        item.add_marker(pytest.mark.xdist_group("realkafka" if real else item.path.name))


# Real Apache Kafka clusters (KAFKA_HOME), started on first use: real_kafka, real_kafka3, real_kafka_tmpfs.
from tests.realkafka_fixtures import real_kafka, real_kafka3, real_kafka_tmpfs  # noqa: E402,F401
