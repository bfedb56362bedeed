"""The dashboard page in headless Chromium over a real topic (Tansu): what a person sees during a throttle, how a
new decision reaches the open page, and the words the page finds for a missing topic or an unreachable cluster.

Set DASHBOARD_SCREENSHOT=path.png to keep the screenshot of the throttle for a look."""
from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.ports import free_port
from harness.chromium import Browser, binary
from harness.dashboard import encode, filling_story, record, steady_story, volume
from tests.support.kafka_fixtures import broker  # noqa: F401 (a fixture)
from harness.kafka_client import create_topic, publish

MINUTE = dt.timedelta(minutes=1)
ROWS = "[...document.querySelectorAll('#overview tbody tr')]"
FIRST_ROW = ROWS + "[0]"


@pytest.fixture(scope="module")
def browser():
    if binary() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    with Browser() as b:
        yield b


def write_config(path: Path, bootstrap: str, topic: str, interval_seconds: int = 60) -> Path:
    path.write_text(
        "client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05\n"
        "client.quota.callback.static.storage.per.volume.soft.limit.min.available.ratio=0.10\n"
        f"client.quota.callback.static.storage.check-interval={interval_seconds}\n"
        f"quota.pipeline.output.kafka.bootstrap.servers={bootstrap}\n"
        f"quota.pipeline.output.topic={topic}\n")
    return path


def fleet(now: dt.datetime) -> list[tuple[bytes, bytes]]:
    """prod-east stopped by broker 3's /data/1, prod-south graded, two healthy, one silent for 10 minutes."""
    stories = {
        "prod-east": filling_story("prod-east", now - 29 * MINUTE, 30, MINUTE),
        "prod-south": [record("prod-south", now - i * MINUTE, 0.5, [volume(2, "/data/3", 0.075, fill_rate=1e6)],
                              throttled_since=now - 5 * MINUTE) for i in range(5, -1, -1)],
        "prod-west": steady_story("prod-west", now - 29 * MINUTE, 30, MINUTE),
        "staging": steady_story("staging", now - 40 * MINUTE, 30, MINUTE, ratio=0.3),
        "legacy": [record("legacy", now, 1.0, [volume(4, "/var/kafka", 0.4)], version=1)],
    }
    out = [(k.encode(), encode(r)) for k, story in stories.items() for r in story]
    return out + [(b"prod-west", b"{this is not a decision")]


def start_dashboard(conf: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "dashboard", "--config", str(conf),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("dashboard on http://"):
        proc.kill()
        raise AssertionError(f"dashboard did not start: {line}{proc.stderr.read()}")
    return proc, line.split()[2]


def test_page_during_a_throttle_shows_the_throttled_cluster_first(broker, browser, tmp_path):
    topic = f"decisions-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic)
    publish(broker.bootstrap_servers, topic, fleet(dt.datetime.now(dt.timezone.utc)))
    proc, url = start_dashboard(write_config(tmp_path / "c.properties", broker.bootstrap_servers, topic))
    try:
        browser.open(url)
        browser.wait_for(f"{ROWS}.length == 5 && !document.getElementById('detail').hidden "
                         "&& document.querySelectorAll('.uplot').length == 2")
        rows = browser.evaluate(f"{ROWS}.map(tr => [...tr.cells].map(td => td.innerText))")
        assert [r[0] for r in rows[:2]] == ["prod-east", "prod-south"] and rows[-1][0] != "staging"
        assert rows[0][1] == "STOPPED every topic" and rows[0][2] == "0" and rows[0][5] == "broker 3 /data/1"
        assert rows[1][2] == "0.5" and "STALE" in {r[0]: r[1] for r in rows}["staging"]
        text = browser.text()
        assert "prod-east\nSTOPPED\nfactor 0" in text
        assert "closest broker 3 /data/1: 1.0% available, hard limit 5.0%" in text
        assert "orders-3 40.0 GiB" in text and "1 record(s) on the topic could not be read" in text
        shot = browser.screenshot(tmp_path / "dashboard.png")
        assert shot.stat().st_size > 20_000
        if os.environ.get("DASHBOARD_SCREENSHOT"):
            shutil.copy(shot, os.environ["DASHBOARD_SCREENSHOT"])
        # A release reaches the open page without a reload; the detail follows the riskiest cluster.
        sent = time.monotonic()
        publish(broker.bootstrap_servers, topic, [(b"prod-east", encode(record(
            "prod-east", dt.datetime.now(dt.timezone.utc), 1.0, [volume(3, "/data/1", 0.5)])))])
        browser.wait_for(f"{FIRST_ROW}.cells[0].innerText == 'prod-south' "
                         "&& document.getElementById('detail-title').innerText == 'prod-south'", timeout=10)
        assert time.monotonic() - sent < 5.0
    finally:
        proc.terminate()
        proc.wait(10)


def test_page_of_a_stopped_cluster_shows_the_scope_the_refused_topics_and_the_dirs_why(browser, tmp_path):
    """A targeted stop of 40 topics (one named like markup): the row says how many, the detail the headline, why
    (the dirs at the hard limit) and every name in a scrollable list; a cluster-wide stop says every topic.

    Set DASHBOARD_STOP_SCREENSHOT=path.png to keep the screenshot."""
    from quota_pipeline.core.clock import SYSTEM
    from quota_pipeline.dashboard import view
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.history import History
    from quota_pipeline.dashboard.server import DashboardServer, bind
    from harness.dashboard import StubFollower

    now = dt.datetime.now(dt.timezone.utc)
    topics = sorted([f"orders.eu-{i:02d}" for i in range(39)] + ["<img src=x onerror=alert(1)>"])
    east = record("prod-east", now, 0.0, [volume(3, "/data/1", 0.01, partitions=(("orders.eu-00", 0, 40 * 1024 ** 3),)),
                                           volume(5, "/data/2", None), volume(1, "/data/0", 0.6)])
    east["stop"] = {"scope": "topics", "topics": topics}
    west = record("prod-west", now, 0.0, [volume(2, "/data/4", 0.02)])
    west["stop"] = {"scope": "cluster"}
    history = History()
    for r in (east, west):
        history.apply(r["cluster_id"].encode(), encode(r))
    feed = Feed(history, StubFollower(), view.ViewSettings(MINUTE, 1.0), SYSTEM)
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    try:
        browser.open(server.url + "#cluster=prod-east")
        browser.wait_for("document.querySelectorAll('#stop-topics li').length == 40 "
                         "&& document.querySelectorAll('.uplot').length == 2")
        rows = browser.evaluate(f"{ROWS}.map(tr => [tr.cells[0].innerText, tr.cells[1].innerText])")
        assert dict(rows) == {"prod-east": "STOPPED 40 topic(s)", "prod-west": "STOPPED every topic"}
        assert browser.evaluate("document.getElementById('stop-headline').innerText") == \
            "STOPPED: writes refused to 40 topics"
        assert browser.evaluate("document.getElementById('stop-why').innerText") == (
            "why: 2 log dir(s) at or below the hard limit (broker 3 /data/1: 1.0% available, hard limit 5.0%; "
            "broker 5 /data/2: offline (counts as full))")
        names = browser.evaluate("[...document.querySelectorAll('#stop-topics li')].map(li => li.textContent)")
        assert names == topics  # every name, the markup one as text: no element was made of it
        assert browser.evaluate("document.querySelectorAll('#detail img').length") == 0
        assert browser.evaluate("(() => { const l = document.getElementById('stop-topics'); "
                                "return l.scrollHeight > l.clientHeight; })()")
        page_text = browser.text()
        assert "2stopped\n0throttled" in page_text, page_text[page_text.find("THROTTLED") - 300:][:600]
        shot = browser.screenshot(Path(os.environ.get("DASHBOARD_STOP_SCREENSHOT") or tmp_path / "stop.png"))
        assert shot.stat().st_size > 20_000
        browser.evaluate("document.querySelectorAll('#overview tbody tr')[1].click()")
        browser.wait_for("document.getElementById('detail-title').innerText == 'prod-west' && "
                         "document.getElementById('stop-headline').innerText.includes('every topic')")
        assert browser.evaluate("document.getElementById('stop-headline').innerText") == \
            "STOPPED: writes refused to every topic of the cluster"
        assert browser.evaluate("document.getElementById('stop-topics').hidden")
    finally:
        server.stop()


def serve(conf_path: Path):
    """The dashboard in this process (faster than a subprocess), retrying every half second."""
    from quota_pipeline.core.config import load
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.server import DashboardServer, bind

    feed = Feed.of(load(conf_path, require_admin=False), retry_seconds=0.5, probe_seconds=1.0).start()
    return feed, DashboardServer(feed, bind("127.0.0.1", 0)).start()


def test_page_says_when_the_topic_is_missing_and_shows_it_once_it_exists(broker, browser, tmp_path):
    topic = f"not-yet-{uuid.uuid4().hex[:8]}"
    feed, server = serve(write_config(tmp_path / "c.properties", broker.bootstrap_servers, topic))
    try:
        browser.open(server.url)
        banner = browser.wait_for("document.getElementById('banner').innerText.includes('does not exist') && "
                                  "document.getElementById('banner').innerText")
        assert f"topic {topic} does not exist" in banner and "Retrying every" in banner
        assert "No decision on the topic yet." in browser.text()
        create_topic(broker.bootstrap_servers, topic)
        publish(broker.bootstrap_servers, topic, [(b"c1", encode(record("c1", dt.datetime.now(dt.timezone.utc), 0.0,
                                                                         [volume(3, "/data/1", 0.01)])))])
        browser.wait_for(f"{ROWS}.length == 1 && document.getElementById('banner').hidden", timeout=15)
    finally:
        server.stop()
        feed.close()


def test_page_says_when_the_cluster_is_unreachable(browser, tmp_path):
    feed, server = serve(write_config(tmp_path / "c.properties", f"127.0.0.1:{free_port()}", "t"))
    try:
        browser.open(server.url)
        banner = browser.wait_for("document.getElementById('banner').innerText.includes('cannot reach') && "
                                  "document.getElementById('banner').innerText")
        assert "cannot reach the Kafka cluster at 127.0.0.1:" in banner and "retrying every" in banner
        assert "No decision on the topic yet." in browser.text()
    finally:
        server.stop()
        feed.close()


def test_page_says_when_the_dashboard_goes_away_and_reconnects(browser):
    from quota_pipeline.core.clock import SYSTEM
    from quota_pipeline.dashboard import view
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.history import History
    from quota_pipeline.dashboard.server import DashboardServer, bind
    from harness.dashboard import StubFollower

    history = History()
    history.apply(b"c1", encode(record("c1", dt.datetime.now(dt.timezone.utc), 0.0, [volume(3, "/data/1", 0.01)])))
    feed = Feed(history, StubFollower(), view.ViewSettings(MINUTE, 1.0), SYSTEM)
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    port = server.sock.getsockname()[1]
    browser.open(server.url)
    browser.wait_for(f"{ROWS}.length == 1 && document.getElementById('banner').hidden")
    server.stop()
    banner = browser.wait_for("!document.getElementById('banner').hidden && "
                              "document.getElementById('banner').innerText", timeout=10)
    assert "Lost the connection to the dashboard server; retrying" in banner
    # What it last knew stays on the page.
    assert browser.evaluate(f"[{FIRST_ROW}.cells[0].innerText, {FIRST_ROW}.cells[2].innerText]") == ["c1", "0"]
    server = DashboardServer(feed, bind("127.0.0.1", port)).start()
    try:
        browser.wait_for("document.getElementById('banner').hidden", timeout=15)
    finally:
        server.stop()


def test_page_over_ten_thousand_clusters_shows_the_riskiest_finds_any_and_merges_a_change(browser):
    """10,000 clusters: the 25 riskiest are drawn with a count, the filter finds any other, and a change to one
    cluster far down the list reaches the page (a pushed change: tests/unit/test_dashboard_updates.py) and moves it up.

    Set DASHBOARD_FLEET_SCREENSHOT=path.png to keep the screenshot."""
    from quota_pipeline.core.clock import SYSTEM
    from quota_pipeline.dashboard import view
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.history import History
    from quota_pipeline.dashboard.server import DashboardServer, bind
    from harness.dashboard import StubFollower

    now = dt.datetime.now(dt.timezone.utc)
    history = History()
    for i in range(10_000):
        name, factor = f"cluster-{i:05d}", 0.0 if i % 500 == 7 else 1.0
        history.apply(name.encode(), encode(record(name, now, factor, [volume(1 + i % 5, f"/data/{i % 3}",
                                                                              0.02 if factor < 1 else 0.5)])))
    feed = Feed(history, StubFollower(), view.ViewSettings(MINUTE, 1.0), SYSTEM)
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    try:
        browser.open(server.url)
        browser.wait_for(f"{ROWS}.length == 25 && !document.getElementById('detail').hidden", timeout=60)
        shown = browser.evaluate("document.getElementById('shown').innerText")
        assert shown.startswith("the 25 riskiest of 10000 cluster(s)")
        rows = browser.evaluate(f"{ROWS}.map(tr => [tr.cells[0].innerText, tr.cells[2].innerText])")
        assert rows[:20] == [[f"cluster-{i:05d}", "0"] for i in range(7, 10_000, 500)] and rows[20][1] == "1"
        assert "10000clusters" in browser.text() and "20stopped" in browser.text()
        shot = browser.screenshot(Path(os.environ.get("DASHBOARD_FLEET_SCREENSHOT") or "/tmp/dashboard-fleet.png"))
        assert shot.stat().st_size > 20_000
        browser.evaluate("(() => { const f = document.getElementById('filter'); f.value = 'cluster-09876'; "
                         "f.dispatchEvent(new Event('input')); })()")
        browser.wait_for(f"{ROWS}.length == 1 && {FIRST_ROW}.cells[0].innerText == 'cluster-09876'")
        browser.evaluate("(() => { const f = document.getElementById('filter'); f.value = ''; "
                         "f.dispatchEvent(new Event('input')); })()")
        history.apply(b"cluster-09876", encode(record("cluster-09876", dt.datetime.now(dt.timezone.utc), 0.0,
                                                      [volume(4, "/data/9", 0.001)])))
        browser.wait_for(f"{FIRST_ROW}.cells[0].innerText == 'cluster-09876' && {FIRST_ROW}.cells[2].innerText == '0'"
                         " && document.getElementById('detail-title').innerText == 'cluster-09876'", timeout=10)
        assert "21stopped" in browser.text()
    finally:
        server.stop()
