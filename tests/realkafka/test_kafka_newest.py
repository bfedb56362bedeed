"""The broker plugins on the newest Kafka (assembled from Maven Central beside KAFKA_HOME's): both load, a stop
refuses a real producer and the release lets it through, and the broker logs no error of ours. The other versions
run in bench/kafka_versions.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.kafka_dist import NEWEST, AssemblyFailed, assemble
from harness.kafka_versions_check import round_trip
from harness.kafka import kafka_home


def test_the_plugins_stop_and_release_a_producer_on_the_newest_kafka(callback_jar: Path):  # noqa: F811
    try:
        home = assemble(NEWEST, kafka_home())
    except AssemblyFailed as exc:
        pytest.skip(str(exc))  # no Maven Central here: the shared version's tests still run
    outcome = round_trip(NEWEST, home, callback_jar)
    assert outcome.problem is None, outcome
    assert outcome.refused_after_s is not None and outcome.acked_after_release_s is not None
