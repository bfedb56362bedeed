"""The README's main command, `quota-pipeline demo`, shortened: it runs the story and ends with a summary; its
dashboard URL comes first, and the page's event stream shows the throttle within two check intervals.
(`./spark-submit.sh` with the demo config is tests/spark/test_demo_submit.py: a file of its own, so xdist can run the two
jobs side by side.)"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request

CHECK_INTERVAL = 2.0  # conf/demo.properties


def test_demo_runs_publishes_and_summarises(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "demo", "--duration", "35",
                             "--metrics-port", "0", "--dashboard-port", "0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    drain = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # the pipe never fills
    first = proc.stdout.readline()
    drain.start()
    try:
        assert first.startswith("dashboard: http://127.0.0.1:"), first + proc.stderr.read()
        lag = throttle_lag(first.split()[1])
        err = proc.stderr.read()
        assert proc.wait(300) == 0, "".join(lines)[-3000:] + err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    drain.join(10)
    out = "".join(lines)
    assert "demo summary" in out and "decisions published" in out
    assert "OBSERVATION" in out
    # The disk of broker 3 starts filling at once: within 35 s the factor has left 1.0 (graded throttle).
    assert "throttled (factor < 1) in 0 of them" not in out
    assert lag < 2 * CHECK_INTERVAL
    # A clean terminal: Spark's JVM and workers and librdkafka write to the demo's log file, not here.
    for chatter in (" WARN ", "Python worker", "%3|", "%4|", "incubator"):
        assert chatter not in out + err, chatter


def throttle_lag(url: str) -> float:
    """Seconds from the first throttling decision's decided_at to its arrival on the page's event stream."""
    deadline = time.monotonic() + 120
    while True:
        try:
            stream = urllib.request.urlopen(url + "api/events", timeout=120)
            break
        except OSError:
            assert time.monotonic() < deadline, "the dashboard never answered"
            time.sleep(0.5)
    with stream:
        for line in stream:
            if line.startswith(b"data: "):
                page = json.loads(line[6:])
                throttled = [c for c in page["clusters"] if c.get("record_factor", 1.0) < 1.0]
                if throttled:
                    return time.time() - throttled[0]["decided_at"]
    raise AssertionError("the event stream ended before a throttle")
