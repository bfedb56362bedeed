"""Spark's JVM runs in a session of its own: the job's priority goes with it, or `nice quota-pipeline run` would not
reach the JVM where the kernel shares CPU time between sessions first (autogroup)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from quota_pipeline.session import carry_priority

pytestmark = pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroup on this kernel")


def _session_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[1])


def test_a_session_started_by_a_niced_job_gets_the_jobs_priority() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert _session_nice(child.pid) == 0
        carry_priority(child.pid, 7)
        assert _session_nice(child.pid) == 7
    finally:
        child.kill()
        child.wait()


def test_by_default_the_session_gets_the_callers_own_niceness() -> None:
    script = ("import os, subprocess, time; from quota_pipeline.session import carry_priority; "
              "c = subprocess.Popen(['sleep', '30'], start_new_session=True); carry_priority(c.pid); "
              "print(open(f'/proc/{c.pid}/autogroup').read().split('nice')[1].strip()); c.kill()")
    out = subprocess.run(["nice", "-n", "3", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "3"
