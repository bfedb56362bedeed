"""The overview pushed as changes: after one cluster changes, an update carries that cluster only; a cluster going
stale or falling back by time alone is updated without a new record; a cluster leaving is a removed key; and the
rows kept per cluster always equal the overview built from scratch."""
from __future__ import annotations

import datetime as dt
import json
import random
import urllib.request

from quota_pipeline.core.clock import ManualClock
from quota_pipeline.dashboard import view
from quota_pipeline.dashboard.feed import Feed
from quota_pipeline.dashboard.history import History
from quota_pipeline.dashboard.server import DashboardServer, PageCache, bind
from harness.dashboard import encode, record, volume
from harness.dashboard import StubFollower
from tests.unit.test_dashboard import next_event

T0 = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.timezone.utc)
MINUTE = dt.timedelta(minutes=1)
SETTINGS = view.ViewSettings(check_interval=MINUTE, fallback=0.5)  # stale after 2 minutes without a decision


def fleet(n: int, clock: ManualClock, **kw) -> History:
    history = History(clock=clock, **kw)
    for i in range(n):
        name = f"c{i:04d}"
        history.apply(name.encode(), encode(record(name, clock.t, 1.0, [volume(1, "/d", 0.5)],
                                                   validity=dt.timedelta(hours=1))))
    return history


def cache_of(history: History, clock: ManualClock) -> PageCache:
    return PageCache(Feed(history, StubFollower(), SETTINGS, clock))  # type: ignore[arg-type]


def test_an_update_after_one_cluster_changes_carries_that_cluster_only():
    clock = ManualClock(T0)
    history = fleet(2000, clock)
    cache = cache_of(history, clock)
    version, full = cache.snapshot()
    assert len(json.loads(full)["clusters"]) == 2000
    clock.t = T0 + dt.timedelta(seconds=5)
    history.apply(b"c1234", encode(record("c1234", clock.t, 0.0, [volume(3, "/data/1", 0.01)])))
    version, body, whole = cache.update(version)
    update = json.loads(body)
    assert not whole and [c["key"] for c in update["clusters"]] == ["c1234"] and update["removed"] == []
    assert update["clusters"][0]["factor_text"] == "0" and update["counts"]["stopped"] == 1
    assert len(body) < 5_000
    # nothing changed since: an empty update (the heartbeat), and the full overview puts the change first
    assert json.loads(cache.update(version)[1])["clusters"] == []
    assert json.loads(cache.body())["clusters"][0]["key"] == "c1234"


def test_a_cluster_going_stale_by_time_is_updated_without_a_new_record():
    clock = ManualClock(T0)
    history = fleet(3, clock)
    clock.t = T0 + MINUTE
    history.apply(b"c0001", encode(record("c0001", clock.t, 1.0, [volume(1, "/d", 0.5)],
                                          validity=dt.timedelta(hours=1))))
    cache = cache_of(history, clock)
    version, _ = cache.snapshot()
    clock.t = T0 + 2 * MINUTE + dt.timedelta(seconds=1)  # c0000 and c0002 decided 2 min 1 s ago; c0001 1 min 1 s
    version, body, _ = cache.update(version)
    update = json.loads(body)
    assert sorted(c["key"] for c in update["clusters"]) == ["c0000", "c0002"]
    assert all(c["stale"] for c in update["clusters"]) and update["counts"]["stale"] == 2
    clock.t += MINUTE
    update = json.loads(cache.update(version)[1])
    assert [(c["key"], c["stale"]) for c in update["clusters"]] == [("c0001", True)]


def test_a_decision_expiring_by_time_shows_the_fallback_without_a_new_record():
    clock = ManualClock(T0)
    history = History(clock=clock)
    history.apply(b"prod", encode(record("prod", T0, 0.0, [volume(3, "/data/1", 0.01)], validity=5 * MINUTE)))
    cache = cache_of(history, clock)
    version, full = cache.snapshot()
    assert json.loads(full)["clusters"][0]["basis"] == "record"
    clock.t = T0 + 4 * MINUTE  # stale (no change of the factor yet)
    version, body, _ = cache.update(version)
    assert [(c["stale"], c["basis"]) for c in json.loads(body)["clusters"]] == [(True, "record")]
    clock.t = T0 + 5 * MINUTE + dt.timedelta(seconds=1)
    (row,) = json.loads(cache.update(version)[1])["clusters"]
    assert (row["factor"], row["basis"]) == (0.5, "fallback") and "expired" in row["reason"]


def test_a_cluster_leaving_the_window_is_a_removed_key():
    clock = ManualClock(T0)
    history = fleet(2, clock, window=dt.timedelta(hours=1))
    cache = cache_of(history, clock)
    version, _ = cache.snapshot()
    clock.t = T0 + 61 * MINUTE
    history.apply(b"c0001", encode(record("c0001", clock.t, 1.0)))
    update = json.loads(cache.update(version)[1])
    assert [c["key"] for c in update["clusters"]] == ["c0001"] and update["removed"] == ["c0000"]
    assert update["counts"]["clusters"] == 1


def test_the_rows_kept_per_cluster_equal_the_overview_built_from_scratch():
    rng = random.Random(7)
    clock = ManualClock(T0)
    history = fleet(50, clock, window=dt.timedelta(minutes=30))
    cache = cache_of(history, clock)
    version, _ = cache.snapshot()
    page: dict[str, dict] = {c["key"]: c for c in json.loads(cache.body())["clusters"]}
    for _ in range(300):
        clock.t += dt.timedelta(seconds=rng.choice([1, 5, 30, 90]))
        name = f"c{rng.randrange(60):04d}"
        roll = rng.random()
        if roll < 0.6:
            history.apply(name.encode(), encode(record(name, clock.t, rng.choice([0.0, 0.5, 1.0]), [
                volume(1, "/d", rng.random())], validity=rng.choice([MINUTE, 10 * MINUTE]))))
        elif roll < 0.7:
            history.apply(name.encode(), b"{not json")
        elif roll < 0.75:
            history.apply(name.encode(), None)
        version, body, whole = cache.update(version)  # what the page merges
        update = json.loads(body)
        if whole:
            page = {}
        page.update((c["key"], c) for c in update["clusters"])
        for key in update.get("removed", []):
            page.pop(key, None)
        scratch = view.page_json(view.overview(history.records(), clock.t, SETTINGS), StubFollower().status(),
                                 clock.t, SETTINGS)
        assert sorted(page.values(), key=lambda c: (
            [float("inf") if x is None else x for x in c["risk"]], c["key"])) == scratch["clusters"]
        assert update["counts"] == scratch["counts"] | {"unreadable_records": history.unreadable_total,
                                                        "refused_records": history.refused_total}


def test_the_event_stream_sends_the_whole_overview_once_then_changes_only():
    clock = ManualClock(T0)
    history = fleet(500, clock)
    feed = Feed(history, StubFollower(), SETTINGS, clock)  # type: ignore[arg-type]
    server = DashboardServer(feed, bind("127.0.0.1", 0)).start()
    try:
        with urllib.request.urlopen(server.url + "api/events", timeout=5) as stream:
            assert len(next_event(stream)["clusters"]) == 500
            history.apply(b"c0042", encode(record("c0042", clock.t, 0.5, [volume(2, "/data/3", 0.07)])))
            pushed = next_event(stream)
        assert [c["key"] for c in pushed["clusters"]] == ["c0042"] and pushed["clusters"][0]["factor"] == 0.5
    finally:
        server.stop()
