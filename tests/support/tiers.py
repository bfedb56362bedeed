"""The suite's tiers: a test file's folder under tests/ says what it needs and about how long it takes."""
from __future__ import annotations

from pathlib import Path

# In the order the suite runs them: the longest first, so that two pytest-xdist workers end at about the same time.
TIERS = {
    "long": "scenarios of minutes: a fault campaign, a Spark standalone cluster, remedy on a filling disk, fleets, the "
            "demo",
    "realkafka": "starts Apache Kafka from KAFKA_HOME (skipped without it)",
    "spark": "runs Spark: the session's SparkSession (local[2]) or the job as a process",
    "unit": "in this process, no JVM: seconds",
}
SPARK_FIXTURES = frozenset({"spark"})
KAFKA_FIXTURES = frozenset({"real_kafka", "real_kafka3", "real_kafka_tmpfs", "callback_jar"})


def tier_of(path: Path, tests: Path) -> str | None:
    """The tier of a test file: the first folder of its path under `tests`, when that is a tier."""
    try:
        first = path.relative_to(tests).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


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
