"""The dashboard without Kafka: reading v1 and v2 records, the bounded history, the view model's facts and risk
order, and the server's JSON and event stream. The page in Chromium: tests/unit/test_dashboard_browser.py."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.model import parse_time
from quota_pipeline.dashboard import view
from quota_pipeline.dashboard.history import History
from quota_pipeline.dashboard.records import parse_record
from harness.dashboard import GIB, StubFollower, encode, filling_story, record, steady_story, volume

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
SETTINGS = view.ViewSettings(check_interval=MINUTE, fallback=0.5)


def history_of(*records: dict, clock: ManualClock | None = None, **kw) -> History:
    """A history fed `records`; the clock reads at least each record's decided_at as it arrives, as it would live."""
    clock = clock or ManualClock(T0)
    h = History(clock=clock, **kw)
    for r in records:
        clock.t = max(clock.t, parse_time(r["decided_at"]))
        assert h.apply(r["cluster_id"].encode(), encode(r), "at t/0@0")
    return h


def summaries(h: History, now: dt.datetime) -> list[view.ClusterSummary]:
    return view.overview(h.records(), now, SETTINGS)


# ---- records ------------------------------------------------------------------------------------------------

def test_v2_record_gives_its_closest_volumes_and_throttled_since():
    vol = volume(3, "/data/1", 0.04, fill_rate=1024.0, partitions=(("orders", 3, 50 * GIB),))
    d = parse_record(encode({**record("c1", T0, 0.0, [vol], throttled_since=T0 - MINUTE), "future_field": 1}))
    assert d.volumes_listed and d.throttled_since == T0 - MINUTE and d.note is None
    (v,) = d.volumes
    assert (v.broker_id, v.log_dir, v.total_bytes, v.top_partitions[0].topic) == (3, "/data/1", 100 * GIB, "orders")
    assert v.headroom_bytes < 0 and v.eta_seconds == 0.0


def test_v1_record_shows_its_worst_volume():
    d = parse_record(encode(record("c1", T0, 0.0, [volume(2, "/data/0", 0.03)], version=1)))
    assert not d.volumes_listed and d.throttled_since is None
    assert [(v.broker_id, v.log_dir, v.available_ratio) for v in d.volumes] == [(2, "/data/0", 0.03)]


def test_a_bad_v2_field_leaves_the_decision_readable_with_a_note():
    d = parse_record(encode({**record("c1", T0, 0.0), "closest_volumes": [{"log_dir": "/x"}]}))
    assert d.throttle_factor == 0.0 and "closest_volumes" in d.note
    assert d.volumes[0].log_dir == "/data/0"  # the worst volume instead


def test_a_diagnostic_brokers_ignore_reads_as_none_and_the_record_is_shown():
    # The brokers take this record (they read no diagnostics), so the page shows it as they apply it.
    d = parse_record(encode({**record("c1", T0, 0.0), "min_available_ratio": "low", "missing_brokers": ["x"]}))
    assert d.throttle_factor == 0.0 and d.min_available_ratio is None and d.missing_brokers == ()


@pytest.mark.parametrize("value", [
    b"{not json", b"[]", json.dumps({**record("c1", T0, 0.0), "schema_version": 3}).encode(),
    json.dumps({**record("c1", T0, 0.0), "throttle_factor": 2}).encode(),
    json.dumps({k: v for k, v in record("c1", T0, 0.0).items() if k != "observed_at"}).encode(),
    json.dumps({k: v for k, v in record("c1", T0, 0.0).items() if k != "decided_at"}).encode(),
])
def test_records_brokers_skip_are_unreadable(value):
    with pytest.raises(ValueError):
        parse_record(value)


# ---- history ------------------------------------------------------------------------------------------------

def test_history_is_bounded_by_the_window_and_the_point_count():
    h = history_of(*steady_story("c1", T0, 100, MINUTE), window=dt.timedelta(minutes=30))
    (rec,) = h.records(with_points=True)
    assert len(rec.points) == 31 and rec.points.t[-1] == (T0 + 99 * MINUTE).timestamp()
    h = history_of(*steady_story("c1", T0, 100, MINUTE), max_points=10)
    assert len(h.records(with_points=True)[0].points) == 10


def test_a_record_older_than_one_read_before_it_is_refused_as_brokers_refuse_it():
    h = history_of(record("c1", T0, 1.0), record("c1", T0 + 2 * MINUTE, 0.0))
    assert not h.apply(b"c1", encode(record("c1", T0 + MINUTE, 0.5)), "at t/0@9")  # written again, or by another
    assert h.refused_total == 1 and "a record written again" in h.last_refused.reason
    assert h.apply(b"c1", encode(record("c1", T0 + 2 * MINUTE, 0.0)))  # the same instant: published again
    (rec,) = h.records(with_points=True)
    assert rec.points.factor == [1.0, 0.0] and rec.latest.throttle_factor == 0.0


def test_unreadable_records_are_counted_per_cluster_and_a_tombstone_changes_nothing():
    h = history_of(record("c1", T0, 1.0))
    assert not h.apply(b"c1", b"{oops", "at t/0@7") and not h.apply(b"c2", b"\xff", "at t/0@8")
    assert h.unreadable_total == 2 and h.last_unreadable.where == "at t/0@8"
    by_key = {r.key: r for r in h.records()}
    assert by_key["c1"].unreadable == 1 and by_key["c2"].latest is None
    h.apply(b"c1", None)  # read as absence, as brokers read it: c1's decision stays on the page
    assert sorted(r.key for r in h.records()) == ["c1", "c2"]


def test_a_record_from_the_future_is_refused_counted_and_hides_no_genuine_decision():
    clock = ManualClock(T0)
    h = history_of(record("c1", T0, 1.0), clock=clock)
    forged = record("c1", dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc), 0.0)
    assert not h.apply(b"c1", encode(forged), "at __quota_throttle_factors/0@41")
    clock.t = T0 + MINUTE
    assert h.apply(b"c1", encode(record("c1", T0 + MINUTE, 0.5)), "at __quota_throttle_factors/0@42")
    (rec,) = h.records(with_points=True)
    assert rec.points.factor == [1.0, 0.5] and rec.latest.throttle_factor == 0.5  # the forged one is nowhere
    assert (h.refused_total, h.last_refused.key, h.last_refused.where) == (1, "c1", "at __quota_throttle_factors/0@41")
    page = view.page_json(view.overview(h.records(), clock.now(), SETTINGS), view.FeedStatus(
        "following", "following", T0, "__quota_throttle_factors", "k:9092", True), clock.now(), SETTINGS,
        refused=(h.refused_total, h.last_refused))
    assert page["counts"]["refused_records"] == 1
    assert page["last_refused"]["where"] == "at __quota_throttle_factors/0@41"
    assert page["last_refused"]["reason"].startswith("observed_at 9999-12-31T00:00:00.000Z is ")
    assert page["clusters"][0]["factor"] == 0.5


def test_the_page_honours_a_valid_until_no_longer_than_brokers_do():
    h = history_of(record("c1", T0, 0.0, validity=dt.timedelta(days=3650)))
    now = T0 + dt.timedelta(minutes=5, seconds=30, milliseconds=1)  # validity PT5M + skew PT30S, then brokers fall back
    (s,) = view.overview(h.records(), now, view.ViewSettings(MINUTE, 0.5, dt.timedelta(minutes=5)))
    assert (s.factor, s.basis) == (0.5, "fallback") and "beyond observed_at + validity + skew" in s.reason


# ---- view ---------------------------------------------------------------------------------------------------

def test_risk_order_factor_then_stale_or_fallback_then_eta_then_ratio():
    now = T0 + 10 * MINUTE
    h = history_of(
        record("ok-roomy", now, 1.0, [volume(1, "/d", 0.6)]),
        record("ok-tight", now, 1.0, [volume(1, "/d", 0.2)]),
        record("ok-filling", now, 1.0, [volume(1, "/d", 0.4, fill_rate=GIB / 100)]),
        record("stale", now - 5 * MINUTE, 1.0, validity=dt.timedelta(hours=1)),
        record("graded", now, 0.5, [volume(1, "/d", 0.075)]),
        record("stopped", now, 0.0, [volume(3, "/data/1", 0.01)]),
        record("fallback", now, 1.0, source="FALLBACK", status="TIMEOUT"),
    )
    h.apply(b"unreadable-only", b"{")
    order = [s.key for s in summaries(h, now)]
    # The fallback applies 0.5 (SETTINGS): it sorts with the factor brokers apply. A cluster without a readable
    # decision is flagged like a stale one and, knowing no ratio, comes after it.
    assert order == ["stopped", "fallback", "graded", "stale", "unreadable-only", "ok-filling", "ok-tight",
                     "ok-roomy"]


def test_a_decision_older_than_two_check_intervals_is_stale():
    h = history_of(record("c1", T0, 1.0, validity=dt.timedelta(hours=1)))
    decided = T0 + dt.timedelta(milliseconds=300)
    assert not summaries(h, decided + 2 * MINUTE)[0].stale
    assert summaries(h, decided + 2 * MINUTE + dt.timedelta(seconds=1))[0].stale


def test_past_valid_until_brokers_apply_the_fallback_and_the_page_says_why():
    h = history_of(record("c1", T0, 0.0, [volume(3, "/data/1", 0.01)], validity=5 * MINUTE))
    (s,) = summaries(h, T0 + 6 * MINUTE)
    assert (s.factor, s.basis, s.state) == (0.5, "fallback", "THROTTLED")
    assert "expired" in s.reason and "said factor 0" in s.reason and "broker 3 /data/1" in s.reason


def test_the_reason_names_the_closest_log_dir_and_the_limit():
    h = history_of(*filling_story("prod", T0, 20, MINUTE))
    (s,) = summaries(h, T0 + 19 * MINUTE + dt.timedelta(seconds=1))
    assert s.factor == 0.0 and s.basis == "record"
    assert s.reason.startswith("1 log dir(s) at or below the hard limit; closest broker 3 /data/1: 1.0% available")
    assert s.throttled_since is not None and s.eta_seconds == 0.0


def test_the_json_of_a_stopped_cluster_carries_the_stop_its_refused_topics_and_the_dirs_why():
    rec = record("c1", T0, 0.0, [volume(3, "/data/1", 0.01), volume(1, "/data/0", 0.6)])
    topics = [f"t{i:02d}" for i in range(14)]
    rec["stop"] = {"scope": "topics", "topics": topics}
    s = summaries(history_of(rec), T0)[0]
    assert s.state == "STOPPED"
    detail, row = view.summary_json(s), view.row_json(s)
    assert detail["stop"] == {"scope": "topics", "headline": "STOPPED: writes refused to 14 topics", "count": 14,
                              "topics": topics, "more": 0, "violations": 1,
                              "dirs": [{"broker_id": 3, "log_dir": "/data/1",
                                        "state": "1.0% available, hard limit 5.0%"}]}
    assert row["stop"]["topics"] == topics[:10] and row["stop"]["more"] == 4
    assert view.counts([s])["stopped"] == 1 and view.counts([s])["throttled"] == 0
    # On the fallback at factor 0 the brokers refuse every write, whatever the last record named.
    fallback = summaries(history_of(rec), T0 + 10 * MINUTE)[0]
    assert view.summary_json(fallback)["stop"] is None  # this fallback is 0.5: no stop
    at_zero = view.summarize(history_of(rec).records()[0], T0 + 10 * MINUTE, view.ViewSettings(MINUTE, 0.0))
    assert at_zero.stop is not None and at_zero.stop.headline == "STOPPED: writes refused to every topic"


def test_v1_throttled_since_comes_from_the_timeline():
    stories = [record("c1", T0 + i * MINUTE, f, version=1) for i, f in enumerate([1.0, 0.5, 0.0, 0.0])]
    (s,) = summaries(history_of(*stories), T0 + 4 * MINUTE)
    assert (s.throttled_since, s.since_approx) == (T0 + MINUTE, False)
    (s,) = summaries(history_of(*stories[1:]), T0 + 4 * MINUTE)
    assert (s.throttled_since, s.since_approx) == (T0 + MINUTE, True)  # the oldest record seen: maybe earlier


def test_timeline_has_the_ratio_limit_lines():
    h = history_of(*filling_story("prod", T0, 5, MINUTE))
    line = view.timeline(h.records(with_points=True)[0])
    assert len(line["t"]) == len(line["factor"]) == len(line["min_ratio"]) == 5
    assert line["hard"] == [0.05] * 5 and line["soft"] == [0.10] * 5
    assert line["min_ratio"][0] == pytest.approx(0.30)


# ---- server -------------------------------------------------------------------------------------------------

@pytest.fixture
def served():
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.server import DashboardServer, bind

    clock = ManualClock(T0 + 20 * MINUTE)
    feed = Feed(history_of(*filling_story("prod", T0, 20, MINUTE), record("idle", T0 + 19 * MINUTE, 1.0),
                           clock=clock), StubFollower(), SETTINGS, clock)
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    yield feed, server.url
    server.stop()


def get(url: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_server_serves_the_page_its_assets_and_the_overview(served):
    feed, url = served
    status, page = get(url)
    assert status == 200 and b"/static/app.js" in page and b"/static/uPlot.iife.min.js" in page
    for asset in ("app.js", "style.css", "uPlot.iife.min.js", "uPlot.min.css"):
        assert get(url + "static/" + asset)[0] == 200
    overview = json.loads(get(url + "api/overview")[1])
    assert [c["key"] for c in overview["clusters"]] == ["prod", "idle"]
    assert overview["clusters"][0]["factor_text"] == "0" and overview["feed"]["state"] == "following"
    detail = json.loads(get(url + "api/cluster/prod")[1])
    assert len(detail["timeline"]["t"]) == 20 and detail["cluster"]["volumes"][0]["log_dir"] == "/data/1"
    assert get(url + "api/cluster/nope")[0] == 404


def test_server_pushes_a_new_decision_to_the_page(served):
    import time
    import urllib.request

    feed, url = served
    with urllib.request.urlopen(url + "api/events", timeout=5) as stream:
        first = next_event(stream)
        assert [c["key"] for c in first["clusters"]] == ["prod", "idle"]
        sent = time.monotonic()
        full = volume(7, "/data/9", 0.0, fill_rate=1.0)
        feed.history.apply(b"idle", encode(record("idle", T0 + 20 * MINUTE, 0.0, [full])))
        pushed = next_event(stream)
        assert time.monotonic() - sent < 2.0
    # the push carries the changed cluster only; its risk places it first (same factor and ETA, smaller ratio)
    assert [c["key"] for c in pushed["clusters"]] == ["idle"] and pushed["removed"] == []
    assert pushed["clusters"][0]["risk"] < first["clusters"][0]["risk"]
    assert [c["key"] for c in json.loads(get(url + "api/overview")[1])["clusters"]] == ["idle", "prod"]


def next_event(stream) -> dict:
    while True:
        line = stream.readline()
        assert line, "the event stream ended"
        if line.startswith(b"data: "):
            return json.loads(line[6:])


def test_the_overview_carries_the_closest_volume_only_and_the_detail_all(served):
    feed, url = served
    overview = json.loads(get(url + "api/overview")[1])["clusters"][0]
    assert "volumes" not in overview and overview["closest"]["log_dir"] == "/data/1"
    assert [v["log_dir"] for v in json.loads(get(url + "api/cluster/prod")[1])["cluster"]["volumes"]] == [
        "/data/1", "/data/0"]


def test_the_records_these_tests_publish_follow_the_decision_schema():
    from quota_pipeline import resources
    stopped = list(filling_story("prod", T0, 12, MINUTE))[-1]
    offline = record("c2", T0, 0.0, [volume(4, "/data/2", None), volume(1, "/data/0", 0.5)])
    for rec in (stopped, offline, record("c3", T0, 1.0, version=1)):
        assert resources.errors("throttle_decision", rec) == []


def test_the_page_reads_the_record_the_pipeline_publishes():
    import dataclasses

    from quota_pipeline.core.model import ClosestVolume, PartitionSize
    from harness.kafka_client import decision

    closest = ClosestVolume(3, "/data/1", 4 * GIB, 100 * GIB, 0.04, -GIB, 1048576.0, 0.0,
                            (PartitionSize("orders", 3, 50 * GIB),))
    published = dataclasses.replace(decision("prod", 0.0, T0), throttled_since=T0 - MINUTE,
                                    closest_volumes=(closest,))
    d = parse_record(json.dumps(published.to_json()).encode())
    assert d.schema_version == 2 and d.throttled_since == T0 - MINUTE and d.volumes_listed
    assert d.volumes[0].to_json() == {**closest.to_json(), "offline": False}


def test_an_offline_dir_that_was_filling_is_said_to_be_so():
    """A dir that went offline after filling to the limit (reason offline-filling) is named as such, so the operator
    knows the throttle comes from its last readings, not from a reading now; an unknown reason shows as plain offline."""
    import dataclasses

    from quota_pipeline.core.model import ClosestVolume
    from harness.kafka_client import decision

    def shown(reason):
        closest = ClosestVolume(2, "/data/0", None, 100 * GIB, None, None, None, 0.0, (), reason)
        published = dataclasses.replace(decision("prod", 0.0, T0), closest_volumes=(closest,))
        [v] = parse_record(json.dumps(published.to_json()).encode()).volumes
        return v, view.volume_state(v, {"hard": {"type": "min.available.ratio", "value": 0.1}})

    v, state = shown("offline-filling")
    assert v.reason == "offline-filling" and state.startswith("offline after filling")
    v, state = shown("\x1b[2Jforged")
    assert v.reason is None and state == "offline (counts as full)"


@pytest.mark.parametrize("args, error", [
    (["--window", "P1M"], "error: --window: must be a positive duration in days, hours, minutes or seconds (got P1M)"),
    (["--window", "soon"], "error: --window: not an ISO-8601 duration (got soon); for example PT6H"),
    (["--max-points", "0"], "error: --max-points: must be at least 1 (got 0)"),
    (["--port", "{taken}"], "error: cannot listen on 127.0.0.1:{taken} (Address already in use); choose another "
                            "port with --port"),
])
def test_dashboard_says_what_to_fix_in_one_line(tmp_path, capsys, args, error):
    import socket

    from quota_pipeline.cli import main

    conf = tmp_path / "c.properties"
    conf.write_text("client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05\n"
                    "quota.pipeline.output.kafka.bootstrap.servers=127.0.0.1:1\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        with pytest.raises(SystemExit) as exit_:
            main(["dashboard", "--config", str(conf), *[a.format(taken=port) for a in args]])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [error.format(taken=port)]
