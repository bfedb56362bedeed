"""The fault campaign's checker can fail (bench/campaign_checker.py): a job made to release early, the Strimzi
offline-log-dir behaviour (`last-known`), is caught. The campaign starts its own 3-node cluster (a tmpfs log dir per
node: root only) with the callback jar, an output broker, the streaming job and paced producers, and stops them all.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.campaign import Settings, run_campaign
from bench.campaign_faults import Planned
from tests.test_campaign_real import _needs_kafka_and_root  # noqa: F401 - skips without KAFKA_HOME or root

pytestmark = pytest.mark.realkafka


def test_the_checker_catches_a_job_that_releases_while_an_offline_log_dir_is_full(tmp_path: Path):
    """`storage.offline.log.dir.policy=last-known` (Strimzi's behaviour) lets the reading of a log dir that went
    offline at ENOSPC expire, so the job releases one validity later although the disk is still full."""
    fill = Planned(at=5.0, kind="fill_enospc", target="node1", hold=45.0)  # the validity (20 s) and then some
    report, _ = run_campaign(Settings(seed=0, seconds=60, replay=False, faults=(fill,), job_properties=(
        ("client.quota.callback.static.storage.offline.log.dir.policy", "last-known"),)), tmp_path)
    unsafe = [v for v in report.violations if v.prop == "unsafe-release"]
    assert unsafe, f"the checker missed the early release: {report}"
    assert "node 1" in unsafe[0].what and "fill_enospc@node1" in unsafe[0].faults
