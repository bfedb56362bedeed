"""What the dashboard and `tail` say of a predictive throttle (issue 21, point 5): which log dir, its ETA, the horizon;
and the page in headless Chromium, without Kafka (the feed's follower is a stub).

Set DASHBOARD_SCREENSHOT=path.png to keep the screenshot of the page for a look."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil

import pytest
from rich.console import Console

from quota_pipeline.core.clock import ManualClock
from quota_pipeline.dashboard import terminal, view
from quota_pipeline.dashboard.records import parse_record
from harness.chromium import Browser, binary
from harness.dashboard import encode, record, steady_story, volume
from harness.dashboard import StubFollower
from tests.unit.test_dashboard import SETTINGS, get, history_of

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
WHY = {"broker_id": 2, "log_dir": "/data/x", "eta_seconds": 840.0, "horizon_seconds": 1800.0}
SENTENCE = "broker 2 /data/x reaches the hard limit in 14 min at the current fill (horizon 30 min)"


def ahead(cluster: str, at: dt.datetime, why: dict | None = WHY) -> dict:
    """A record throttled by the predictive step: no log dir near a limit, factor ETA / horizon."""
    factor = 1.0 if why is None else why["eta_seconds"] / why["horizon_seconds"]
    out = record(cluster, at, factor, [volume(2, "/data/x", 0.3, fill_rate=5e7), volume(1, "/data/0", 0.6)],
                 throttled_since=None if why is None else at - 3 * MINUTE)
    return {**out, "predictive": why}


def fleet(clock: ManualClock):
    return history_of(*steady_story("calm", T0, 10, MINUTE), *[ahead("prod", T0 + i * MINUTE) for i in range(10)],
                      record("stopped", T0 + 9 * MINUTE, 0.0, [volume(3, "/data/1", 0.01)]), clock=clock)


def test_the_view_says_the_predictive_throttle_is_the_reason():
    h = fleet(ManualClock(T0 + 10 * MINUTE))
    by_key = {s.key: s for s in view.overview(h.records(), T0 + 10 * MINUTE, SETTINGS)}
    prod = by_key["prod"]
    assert prod.state == "THROTTLED" and prod.reason.startswith(f"predictive throttle: {SENTENCE}")
    assert view.summary_json(prod)["predictive"] == WHY
    # A stop by the hard limit is not called predictive, and neither is an unthrottled cluster.
    assert "predictive" not in by_key["stopped"].reason and view.summary_json(by_key["calm"])["predictive"] is None


def test_a_record_without_the_field_or_with_a_bad_one_is_still_shown():
    older = ahead("prod", T0)
    del older["predictive"]
    assert parse_record(encode(older)).predictive is None and parse_record(encode(older)).note is None
    bad = parse_record(encode({**ahead("prod", T0), "predictive": {"broker_id": 2, "log_dir": "/data/x"}}))
    assert bad.predictive is None and bad.throttle_factor == pytest.approx(840 / 1800)
    assert bad.note.startswith("predictive could not be read")


def test_tail_shows_the_predictive_throttle_in_its_table_and_detail():
    now = T0 + 10 * MINUTE
    h = fleet(ManualClock(now))
    h.apply(b"odd", encode(ahead("odd", T0 + 9 * MINUTE, {**WHY, "log_dir": "/d\x1b[2J"})))
    console = Console(record=True, width=200, color_system=None)
    console.print(terminal.render(view.overview(h.records(), now, SETTINGS), StubFollower().status(), now, SETTINGS))
    text = console.export_text()
    prod_row = next(line for line in text.splitlines() if line.startswith("prod "))
    assert "THROTTLED PREDICTIVE" in prod_row and "0.47" in prod_row
    assert f"prod: THROTTLED, factor 0.47: predictive throttle: {SENTENCE}" in text
    assert "PREDICTIVE" not in next(line for line in text.splitlines() if line.startswith("stopped "))
    assert "broker 2 /d\\x1b[2J reaches the hard limit" in text and "\x1b" not in text  # outside text, escaped


@pytest.fixture
def page():
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.server import DashboardServer, bind

    if binary() is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    clock = ManualClock(T0 + 10 * MINUTE)
    feed = Feed(fleet(clock), StubFollower(), SETTINGS, clock)
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    try:
        with Browser() as b:
            yield feed, server.url, b
    finally:
        server.stop()


def test_the_page_shows_a_predictive_badge_and_says_why(page, tmp_path):
    feed, url, browser = page
    assert json.loads(get(url + "api/overview")[1])["clusters"][1]["predictive"] == WHY
    browser.open(url + "#cluster=prod")
    browser.wait_for("document.getElementById('detail-title').innerText == 'prod' "
                     "&& document.querySelectorAll('.uplot').length == 2")
    rows = browser.evaluate("[...document.querySelectorAll('#overview tbody tr')].map(tr => [tr.cells[0].innerText, "
                            "tr.cells[1].innerText, [...tr.cells[1].querySelectorAll('.badge')].pop().title])")
    assert rows[0][:2] == ["stopped", "STOPPED every topic"]
    assert rows[1] == ["prod", "THROTTLED PREDICTIVE", f"predictive throttle: {SENTENCE}"]
    text = browser.text()
    assert f"predictive throttle: {SENTENCE}" in text  # the reason
    assert f"Predictive throttle in force: {SENTENCE}." in text and "(factor 0.47)" in text
    assert f"predictive throttle\n{SENTENCE}" in text  # the facts
    browser.evaluate("(() => { const f = document.getElementById('filter'); f.value = 'predictive'; "
                     "f.dispatchEvent(new Event('input')); })()")
    assert browser.evaluate("[...document.querySelectorAll('#overview tbody tr')].map(tr => tr.cells[0].innerText)") \
        == ["prod"]
    shot = browser.screenshot(tmp_path / "predictive.png")
    assert shot.stat().st_size > 20_000
    if os.environ.get("DASHBOARD_SCREENSHOT"):
        shutil.copy(shot, os.environ["DASHBOARD_SCREENSHOT"])
