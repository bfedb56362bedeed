"""The fault campaign on real Kafka (verify/campaign.py): a short campaign on a fixed schedule the checker passes,
and a job made to release early (the Strimzi offline-log-dir behaviour, `last-known`) that the checker catches.

Each test starts its own 3-node cluster (a tmpfs log dir per node: root only) with the callback jar, an output
broker, the streaming job and paced producers, and stops them all. 7 min 48 s together at a load average of 10-18 on
2 cores (bench/RESULTS.md), most of it Kafka's and Spark's start-up; about 3 minutes is the aim on a quiet machine.
The two stay in one file, so one pytest-xdist worker runs them one after the other: run side by side on 2 cores
(each a 3-node cluster and a Spark job) the short campaign's job published too few decisions to judge.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from verify.campaign import Settings, run_campaign
from verify.faults import Planned
from harness.kafka import KafkaUnavailable, kafka_home

# A fixed schedule, spaced so that every fault leaves the job room to show it handled it on a busy 2-core machine
# (observations up to 8 s apart, a killed broker back after up to 25 s): a fill past the hard limit alone (its
# detection delay is timed), a future-dated release, kill -9 of one node while another fills to ENOSPC (a partial view
# that must still stop; the offline dir freed and its broker restarted), the output broker stopped past the validity,
# a malformed record. A seeded schedule once put the output stop 6 s after a fill, before the slowed job's next
# observation, and nothing was left to time. The job is not killed here (Spark's restart takes minutes on a busy
# 2-core machine; tests/spark/test_stream.py restarts it from its checkpoint, and the 30-minute campaign kills it), and the replay
# is left to the 30-minute campaign for the same reason.
SHORT_SCHEDULE = (
    Planned(at=6.0, kind="forge_future", target="topic", hold=0.0),
    Planned(at=10.0, kind="fill_hard", target="node2", hold=14.0),
    Planned(at=28.0, kind="kill9", target="node1", hold=4.0),
    Planned(at=30.0, kind="fill_enospc", target="node3", hold=12.0),
    Planned(at=46.0, kind="output_stop", target="output", hold=22.0),
    Planned(at=52.0, kind="forge_malformed", target="topic", hold=0.0),
)


@pytest.fixture(autouse=True)
def _needs_kafka_and_root():
    try:
        kafka_home()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    if os.geteuid() != 0:
        pytest.skip("the campaign mounts a tmpfs log dir per node: run the tests as root")


def test_a_short_campaign_finds_no_violation(tmp_path: Path):
    report, history = run_campaign(Settings(seed=0, seconds=75, replay=False, faults=SHORT_SCHEDULE),
                                   tmp_path)
    lines = (history / "faults.jsonl").read_text()
    assert report.violations == [], "\n".join(map(str, report.violations))
    assert report.decisions > 10, "the job published too few decisions to judge"
    assert {"fill_enospc", "fill_hard", "output_stop", "kill9", "forge_future"} <= set(report.faults_by_kind), lines
    assert report.detection_delays and max(report.detection_delays) <= report.detection_allowance_s
    assert '"error"' not in lines, f"a fault could not be injected: {lines}"


def test_the_checker_catches_a_job_that_releases_while_an_offline_log_dir_is_full(tmp_path: Path):
    """`storage.offline.log.dir.policy=last-known` (Strimzi's behaviour) lets the reading of a log dir that went
    offline at ENOSPC expire, so the job releases one validity later although the disk is still full."""
    fill = Planned(at=5.0, kind="fill_enospc", target="node1", hold=45.0)  # the validity (20 s) and then some
    report, _ = run_campaign(Settings(seed=0, seconds=60, replay=False, faults=(fill,), job_properties=(
        ("client.quota.callback.static.storage.offline.log.dir.policy", "last-known"),)), tmp_path)
    unsafe = [v for v in report.violations if v.prop == "unsafe-release"]
    assert unsafe, f"the checker missed the early release: {report}"
    assert "node 1" in unsafe[0].what and "fill_enospc@node1" in unsafe[0].faults
