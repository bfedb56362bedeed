"""The README's main command, `quota-pipeline demo`, shortened: it tells the story a person follows (STORY lines, also
on the page) and ends with a summary; its dashboard URL comes first, and the page's event stream shows the throttle
within two check intervals.
(`./spark-submit.sh` with the demo config is tests/spark/test_demo_submit.py: a file of its own, so xdist can run the
two jobs side by side.)"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

CHECK_INTERVAL = 2.0  # conf/demo.properties


def test_demo_runs_publishes_and_summarises(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "demo", "--duration", "66",
                             "--metrics-port", "0", "--dashboard-port", "0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    drain = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # the pipe never fills
    first = proc.stdout.readline()
    drain.start()
    try:
        assert first.startswith("dashboard: http://127.0.0.1:"), first + proc.stderr.read()
        url = first.split()[1]
        lag = throttle_lag(url)
        told = page_story(url, "broker 5 missing")
        err = proc.stderr.read()
        assert proc.wait(300) == 0, "".join(lines)[-3000:] + err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    drain.join(10)
    out = "".join(lines)
    assert "decisions published" in out and "OBSERVATION" in out
    assert lag < 2 * CHECK_INTERVAL
    # The story, each line once and stamped as the records are (conf/scenarios/demo.yaml's dir, topics, broker).
    story = [line for line in out.splitlines() if line.startswith("STORY ")]
    assert all(re.match(r"STORY +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  \S", line) for line in story), story
    for seen in (r"log dir filled: broker 3 /var/lib/kafka/data-1 \(\d", "stop began: writes refused to 3 topics: "
                 r"clickstream, orders, payments \(scope topics\)$", "demo producer \\(User:demo-app\\): write to "
                 "orders refused with TOPIC_AUTHORIZATION_FAILED; its writes to inventory accepted",
                 r"stop released \(factor [\d.]+\): broker 3 /var/lib/kafka/data-1 .* above the 10% free hard limit",
                 r"demo producer: writes to orders accepted again after \d+ refused",
                 r"broker 5 missing \(status \w+\)"):
        assert sum(bool(re.search(seen, line)) for line in story) == 1, (seen, story)
        assert any(re.search(seen, line) for line in told), (seen, told)
    # The summary's table stands on its own line, not against the live table's border.
    rows = out.splitlines()
    title = next(i for i, line in enumerate(rows) if "demo summary" in line)
    assert rows[title - 1].strip() == "", rows[title - 1]
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


def page_story(url: str, last: str) -> list[str]:
    """The story as the demo's page shows it (/api/story), read until a line holds `last` or the page goes away."""
    told: list[str] = []
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and not any(last in line for line in told):
        try:
            with urllib.request.urlopen(url + "api/story", timeout=10) as answer:
                body = json.load(answer)
        except OSError:
            break  # the demo ended and took its page with it
        assert body["enabled"]
        told = [line["text"] for line in body["lines"]]
        time.sleep(1)
    return told
