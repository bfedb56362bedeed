"""The dashboard's state stays bounded: a cluster silent for longer than the window leaves the page; and its record
intake (History.apply, what the follower hands every topic record to) takes anything without raising (hypothesis)."""
from __future__ import annotations

import datetime as dt
import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from quota_pipeline.core.clock import ManualClock
from quota_pipeline.core.signing import HEADER, SigningKey, sign
from quota_pipeline.dashboard import view
from quota_pipeline.dashboard.feed import Feed
from quota_pipeline.dashboard.history import History
from quota_pipeline.dashboard.server import DashboardServer, bind
from harness.dashboard import encode, record, volume
from harness.dashboard import StubFollower
from tests.unit.test_dashboard import get

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
SETTINGS = view.ViewSettings(check_interval=MINUTE, fallback=0.5)


def test_a_silent_cluster_leaves_the_page_after_the_window():
    clock = ManualClock(T0)
    history = History(window=dt.timedelta(hours=1), clock=clock)
    feed = Feed(history, StubFollower(), SETTINGS, clock)  # type: ignore[arg-type]
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    try:
        for i in range(90):  # "live" publishes every minute for 90 minutes; "gone" once, at the start
            clock.t = T0 + i * MINUTE
            history.apply(b"live", encode(record("live", clock.t, 1.0, [volume(1, "/d", 0.5)])))
            if i == 0:
                history.apply(b"gone", encode(record("gone", clock.t, 0.5, [volume(1, "/d", 0.01)])))
                history.apply(b"garbage", b"{not json")  # an unreadable key is shown, and leaves too
            if i == 59:
                page = json.loads(get(server.url + "api/overview")[1])
                assert {c["key"] for c in page["clusters"]} == {"live", "gone", "garbage"}
        page = json.loads(get(server.url + "api/overview")[1])
        assert [c["key"] for c in page["clusters"]] == ["live"]
        assert get(server.url + "api/cluster/gone")[0] == 404
        # an old record of a silent cluster (a topic read from its start) does not bring it back
        assert not history.apply(b"gone", encode(record("gone", T0 + MINUTE, 0.5)))
        assert [c.key for c in history.records()] == ["live"]
    finally:
        server.stop()


_BASE = record("c1", T0, 0.5, [volume(1, "/d", 0.1)])


def _record_bytes() -> st.SearchStrategy[bytes]:
    fields = st.fixed_dictionaries({}, optional={
        "schema_version": st.one_of(st.sampled_from([1, 2, 3, True, 1.0, "1"]), st.integers()),
        "cluster_id": st.one_of(st.text(max_size=10), st.integers(), st.none()),
        "observed_at": st.one_of(st.sampled_from(["2026-11-21T10:00:00Z", "9999-12-31T23:59:59-14:00",
                                                  "0001-01-01T00:00:00+14:00", "2026-02-30T00:00Z", ""]),
                                 st.datetimes(timezones=st.just(dt.timezone.utc)).map(lambda t: t.isoformat()),
                                 st.text(max_size=30)),
        "decided_at": st.one_of(st.just("2026-11-21T10:00:00Z"), st.text(max_size=30), st.none()),
        "valid_until": st.one_of(st.just("2026-11-21T10:05:00Z"), st.text(max_size=30), st.none()),
        "throttle_factor": st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=5)),
        "source": st.sampled_from(["OBSERVATION", "RETAINED", "FALLBACK", "x", ""]),
        "status": st.sampled_from(["SUCCESS", "FAILED", ""]),
        "min_available_ratio": st.one_of(st.floats(), st.none(), st.text(max_size=4)),
        "closest_volumes": st.lists(st.dictionaries(st.sampled_from(
            ["broker_id", "log_dir", "available_bytes", "total_bytes", "available_ratio", "offline", "eta_seconds"]),
            st.one_of(st.integers(), st.floats(), st.text(max_size=8), st.none(), st.booleans())), max_size=3),
        "limit": st.one_of(st.none(), st.dictionaries(st.sampled_from(["hard", "soft"]), st.one_of(
            st.none(), st.fixed_dictionaries({"type": st.sampled_from(["min.available.ratio", "x"]),
                                              "value": st.one_of(st.floats(), st.integers())})))),
        "violations": st.one_of(st.integers(), st.text(max_size=3)),
    })
    merged = fields.map(lambda f: json.dumps({**_BASE, **f}).encode())
    return st.one_of(merged, st.binary(max_size=200), merged.map(lambda b: b[: len(b) // 2]),
                     st.integers(0, 3000).map(lambda n: b"[" * n + b"]" * n))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.one_of(st.none(), st.binary(max_size=20)), values=st.lists(_record_bytes(), min_size=1, max_size=4))
@example(key=None, values=[encode({**_BASE, "closest_volumes": [{"broker_id": 0, "log_dir": "/d",
                                                                 "available_bytes": float("inf")}]})])
@example(key=b"k", values=[encode({**_BASE, "min_available_ratio": float("nan"), "active_brokers": float("inf")})])
@example(key=b"v1", values=[encode({**_BASE, "schema_version": 1, "closest_volumes": None, "worst_volume": {
    "broker_id": 1, "log_dir": "/d", "available_bytes": float("inf"), "available_ratio": float("nan")}})])
def test_the_record_intake_takes_anything_and_the_page_still_builds(key, values):
    clock = ManualClock(T0 + MINUTE)
    history = History(clock=clock)
    feed = Feed(history, StubFollower(), SETTINGS, clock)  # type: ignore[arg-type]
    for value in values:
        taken = history.apply(key, value, "at t/0@1")  # never raises
        assert taken in (True, False)
    json.dumps(feed.page(), allow_nan=False)  # a browser reads no Infinity or NaN
    for rec in history.records():
        json.dumps(feed.detail(rec.key), allow_nan=False)
    # every record is either on a timeline or counted (unreadable, refused) or outside the window
    assert history.point_count() <= sum(1 for _ in values)


HOSTILE = {  # one record of a cluster that must not take the page or `tail` down for every other cluster
    "a closest_volumes entry that is not an object": {"closest_volumes": ["x"]},
    "an ETA beyond float's range": {"predictive": {"broker_id": 1, "log_dir": "/d", "eta_seconds": 1e999,
                                                   "horizon_seconds": 60}},
    "NaN in the limit": {"limit": {"hard": {"type": "min.available.ratio", "value": float("nan")}, "soft": None}},
    "NaN in predictive": {"predictive": {"broker_id": 1, "log_dir": "/d", "eta_seconds": float("nan"),
                                         "horizon_seconds": 60}},
}


def test_a_hostile_record_marks_its_cluster_and_the_page_and_tail_show_every_cluster():
    from rich.console import Console

    from quota_pipeline.dashboard import terminal
    for what, fields in HOSTILE.items():
        clock = ManualClock(T0)
        history = History(window=dt.timedelta(hours=1), clock=clock)
        assert history.apply(b"bad", json.dumps({**record("bad", T0, 0.0, [volume(1, "/d", 0.01)]), **fields})
                             .encode()), what
        assert history.apply(b"good", encode(record("good", T0, 1.0, [volume(1, "/d", 0.5)]))), what
        summaries = view.overview(history.records(with_points=True), T0, SETTINGS)
        assert {s.key for s in summaries} == {"bad", "good"}, what
        page = [view.summary_json(s) for s in summaries] + [view.timeline(r) for r in history.records(True)]
        json.dumps(page, allow_nan=False)  # the page's JSON parses in a browser
        bad = next(s for s in summaries if s.key == "bad")
        assert bad.latest.note, f"{what}: the cluster says which field could not be read"
        console = Console(width=160, record=True)
        feed = view.FeedStatus("following", "following t", T0, "__quota_throttle_factors", "k:9092", caught_up=True)
        console.print(terminal.render(summaries, feed, T0, SETTINGS))
        shown = console.export_text()
        assert "good" in shown and "bad" in shown, what


def test_a_reading_error_is_shown_capped_whatever_the_records_size():
    history = History(window=dt.timedelta(hours=1), clock=ManualClock(T0))
    assert not history.apply(b"c1", b'{"schema_version": 2, "cluster_id": "' + b"x" * 900_000 + b'", "observed_at": 1}')
    assert history.last_unreadable is not None and len(history.last_unreadable.error) < 400


_KEY = SigningKey("k1", "k1-secret-0123456789abcdef0123456789")
_GARBAGE = [b"{not json", b"", b"[" * 2000, b'{"schema_version": 2, "cluster_id": "c1"}', b"\xff\xfe", b"null"]


def test_with_signing_keys_unsigned_garbage_makes_no_row_and_leaves_the_genuine_one_alone():
    clock = ManualClock(T0 + MINUTE)
    history = History(window=dt.timedelta(hours=6), clock=clock, signing_keys=(_KEY,))
    feed = Feed(history, StubFollower(), SETTINGS, clock)  # type: ignore[arg-type]
    genuine = encode(record("c1", T0, 0.5, [volume(1, "/d", 0.1)]))
    assert history.apply(b"c1", genuine, "at t/0@0", [(HEADER, sign(_KEY, b"c1", genuine))])
    before = feed.page()["clusters"]
    forged_mac = [(HEADER, sign(SigningKey("k1", "someone-else-0123456789abcdef012345"), b"c1", b"{"))]
    n = 20_000
    for i in range(n):  # distinct keys, the genuine cluster's key, no header or a wrong one
        key = b"c1" if i % 4 == 0 else None if i % 4 == 1 else f"garbage-{i}".encode()
        assert not history.apply(key, _GARBAGE[i % len(_GARBAGE)], f"at t/0@{i + 1}", forged_mac if i % 3 else None)
    page = feed.page()
    assert [c["key"] for c in page["clusters"]] == ["c1"]  # one row, however many records were written
    assert page["clusters"] == before  # its factor, its unreadable count and error text as they were
    assert page["counts"]["refused_records"] == n and page["counts"]["unreadable_records"] == 0
    assert page["last_unreadable"] is None and "signature" in page["last_refused"]["reason"]


def test_without_signing_a_reading_error_goes_only_to_the_cluster_its_key_names():
    history = History(window=dt.timedelta(hours=1), clock=ManualClock(T0 + MINUTE))
    name = "c1\ufffd"  # a genuine cluster whose key a non-UTF-8 key decodes to
    assert history.apply(name.encode(), encode(record(name, T0, 1.0, [volume(1, "/d", 0.5)])))
    assert not history.apply(b"c1\xff", b"{not json", "at t/0@1")
    assert not history.apply(None, b"{not json", "at t/0@2")
    assert [(r.key, r.unreadable, r.last_error) for r in history.records()] == [(name, 0, None)]
    assert history.unreadable_total == 2 and history.last_unreadable.where == "at t/0@2"
    assert not history.apply(name.encode(), b"{not json", "at t/0@3")  # its own key: shown on its row, as before
    assert [(r.key, r.unreadable, r.last_error.where) for r in history.records()] == [(name, 1, "at t/0@3")]
