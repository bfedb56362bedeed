"""Shared fixtures: one SparkSession for the whole test session (local[2], 2 shuffle partitions, no UI)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from quota_pipeline.session import JAVA_HINT, java_available
from tests.support.tiers import TIERS, misplaced, tier_of

TESTS = Path(__file__).resolve().parent


def pytest_configure(config):
    for name, what in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    # pytest-xdist hands out files with the most tests first; the tiers' order (the longest first, pyproject's
    # testpaths) is what lets two workers end together: a one-test long scenario handed out last is a tail of minutes.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """Each test is marked with its folder's tier (`-m unit`, `-m "not long"`); one that needs more than its tier
    allows fails the collection, so a tier's folder never hides a slower test."""
    wrong = []
    for item in items:
        tier = tier_of(Path(item.path), TESTS)
        if tier:
            item.add_marker(tier)
        why = misplaced(tier, set(item.fixturenames))
        if why:
            wrong.append(f"{item.nodeid}: {why}")
    if wrong:
        raise pytest.UsageError("tests outside their tier: " + "; ".join(wrong[:10]))


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


# Real Apache Kafka clusters (KAFKA_HOME), started on first use: real_kafka, real_kafka3, real_kafka_tmpfs; and the
# broker plugins' jar they load, built once (callback_jar).
from tests.support.realkafka_fixtures import callback_jar, real_kafka, real_kafka3, real_kafka_tmpfs  # noqa: E402,F401
