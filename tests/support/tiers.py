"""The suite's tiers: a test file's folder under tests/ says what it needs and about how long it takes."""
from __future__ import annotations

from pathlib import Path

# In the order the suite runs them: the longest first, so that the pytest-xdist workers end at about the same time.
TIERS = {
    "long": "scenarios of minutes: a fault campaign, a Spark standalone cluster, remedy on a filling disk, fleets, the "
            "demo",
    "realkafka": "starts Apache Kafka from KAFKA_HOME (skipped without it)",
    "spark": "runs Spark: the session's SparkSession (local[2]) or the job as a process",
    "unit": "in this process, no JVM: seconds",
}
# The long tier's files by the CPU each took in a profiled run (docs/testing.md), the costliest first: handed out in
# this order, the workers start with the heaviest scenarios instead of ending on one of them. A file not named
# runs after these.
LONG_FIRST = ("test_standalone_s3.py", "test_campaign.py", "test_remedy.py", "test_fleet_callback.py",
              "test_demo.py", "test_fleet_enforce.py", "test_authorizer_cases.py", "test_fleet_change.py")
SPARK_FIXTURES = frozenset({"spark"})
KAFKA_FIXTURES = frozenset({"real_kafka", "real_kafka3", "real_kafka_tmpfs", "callback_jar"})


def tier_of(path: Path, tests: Path) -> str | None:
    """The tier of a test file: the first folder of its path under `tests`, when that is a tier."""
    try:
        first = path.relative_to(tests).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def run_order(path: Path, tests: Path) -> tuple[int, int]:
    """Where a test file runs: its tier's place in TIERS, then (in the long tier) its place in LONG_FIRST."""
    tier = tier_of(path, tests)
    rank = list(TIERS).index(tier) if tier else len(TIERS)
    named = LONG_FIRST.index(path.name) if tier == "long" and path.name in LONG_FIRST else len(LONG_FIRST)
    return rank, named


def misplaced(tier: str | None, fixtures: set[str]) -> str | None:
    """Why a test with these fixtures does not belong in `tier`, or None when it does. A test needs no more than its
    tier allows: a unit test no JVM, a Spark test no real Kafka; the long tier may need anything."""
    if tier is None:
        return f"a test file belongs in one of the tiers' folders: tests/{{{','.join(TIERS)}}}/"
    if tier in ("unit", "spark") and fixtures & KAFKA_FIXTURES:
        return f"it uses real Kafka ({', '.join(sorted(fixtures & KAFKA_FIXTURES))}): move it to tests/realkafka/"
    if tier == "unit" and fixtures & SPARK_FIXTURES:
        return "it uses the SparkSession: move it to tests/spark/"
    return None
