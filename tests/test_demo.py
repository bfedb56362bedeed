"""The README's main command, `quota-pipeline demo`, shortened: it runs the story and ends with a summary."""
from __future__ import annotations

import subprocess
import sys


def test_demo_runs_publishes_and_summarises(tmp_path):
    done = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "demo", "--duration", "35",
                           "--metrics-port", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "demo summary" in out and "decisions published" in out
    assert "OBSERVATION" in out
    # The disk of broker 3 starts filling at once: within 35 s the factor has left 1.0 (graded throttle).
    assert "throttled (factor < 1) in 0 of them" not in out
