"""The fault campaign on real Kafka (bench/campaign.py): a short seeded campaign the checker passes (the checker
catching a job made to release early is tests/test_campaign_checker_real.py, a file of its own so that the two
campaigns can run on different pytest-xdist workers).

The test starts its own 3-node cluster (a tmpfs log dir per node: root only) with the callback jar, an output
broker, the streaming job and paced producers, and stops them all. Most of its time is Kafka's and Spark's
start-up.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.campaign import Settings, run_campaign
from tests.realkafka import KafkaUnavailable, kafka_home

pytestmark = pytest.mark.realkafka

# kill -9 of a node, a future-dated release, a fill past the hard limit overlapping a fill to ENOSPC (offline, then
# freed and the broker restarted) and the output broker stopped past the validity, a malformed record. The job is not
# killed here (Spark's restart takes minutes on a busy 2-core machine; tests/test_stream.py restarts it from its
# checkpoint, and the bench campaign kills it), and the replay is left to the bench campaign for the same reason.
SHORT_SEED = 39


@pytest.fixture(autouse=True)
def _needs_kafka_and_root():
    try:
        kafka_home()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    if os.geteuid() != 0:
        pytest.skip("the campaign mounts a tmpfs log dir per node: run the tests as root")


def test_a_short_seeded_campaign_finds_no_violation(tmp_path: Path):
    report, history = run_campaign(Settings(seed=SHORT_SEED, seconds=75, replay=False, exclude=("job_kill",)),
                                   tmp_path)
    lines = (history / "faults.jsonl").read_text()
    assert report.violations == [], "\n".join(map(str, report.violations))
    assert report.decisions > 10, "the job published too few decisions to judge"
    assert {"fill_enospc", "fill_hard", "output_stop", "kill9", "forge_future"} <= set(report.faults_by_kind), lines
    assert report.detection_delays and max(report.detection_delays) <= report.detection_allowance_s
    assert '"error"' not in lines, f"a fault could not be injected: {lines}"
