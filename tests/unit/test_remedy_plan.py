"""The remedy planner: the fewest bytes, never a target past its own limit, replicas on distinct brokers and as many
racks, moving partitions and the decision topic left alone; the table and the JSON."""
from __future__ import annotations

import itertools
import json
import math

from hypothesis import given, settings as hsettings, strategies as st
from rich.console import Console

from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.remedy.inputs import ClusterView, Dir, Replica, log_dir_replicas, with_growth
from quota_pipeline.remedy.need import Margin, goal_bytes, needs, parse_size
from quota_pipeline.remedy.plan import CROSS, INTRA, MovePlan
from quota_pipeline.remedy.planner import plan, required_bytes, target_after, Load
from quota_pipeline.remedy.render import as_json, as_tables
from quota_pipeline.remedy.select import fewest_bytes

M = 2 ** 20
HARD = Limits(Limit("bytes", 10 * M))
SOFT = Limits(Limit("bytes", 10 * M), Limit("bytes", 20 * M))
NO_MARGIN = Margin("bytes", 0)
FAST = 10 ** 12  # a throttle so fast that growth during moves is nothing


def view(dirs, replicas, assignments=None, racks=None, **kw) -> ClusterView:
    brokers = sorted({d.broker for d in dirs})
    if assignments is None:
        assignments = {}
        for r in replicas:
            assignments[r.tp] = tuple(sorted(set(assignments.get(r.tp, ())) | {r.broker}))
    return ClusterView("c", racks or {b: None for b in brokers}, tuple(dirs), tuple(replicas), assignments, **kw)


def test_a_dir_past_its_hard_limit_moves_the_fewest_bytes_to_its_own_brokers_other_dir():
    v = view([Dir(1, "/a", 100 * M, 5 * M), Dir(1, "/b", 100 * M, 80 * M)],
             [Replica("t", 0, 1, "/a", 30 * M), Replica("t", 1, 1, "/a", 12 * M), Replica("t", 2, 1, "/a", 9 * M),
              Replica("u", 0, 1, "/a", 4 * M)])
    p = plan(v, HARD, Margin("bytes", 5 * M), FAST)
    # 10 MiB short of 15 MiB: 12 MiB alone beats 9 + 4 = 13 MiB and 30 MiB.
    assert [(m.topic, m.partition, m.kind, m.target) for m in p.moves] == [("t", 1, INTRA, (1, "/b"))]
    assert p.dirs[0].resolved and p.dirs[0].after == 17 * M and p.moved_bytes == 12 * M
    assert "same broker" in p.moves[0].why


def test_without_room_on_its_broker_it_goes_to_another_broker_that_holds_no_replica_of_it():
    v = view([Dir(1, "/a", 100 * M, 5 * M), Dir(1, "/b", 100 * M, 16 * M), Dir(2, "/a", 100 * M, 90 * M),
              Dir(3, "/a", 100 * M, 95 * M)],
             [Replica("t", 0, 1, "/a", 12 * M)], assignments={("t", 0): (1, 3)})
    p = plan(v, HARD, Margin("bytes", 5 * M), FAST)
    (m,) = p.moves
    assert m.kind == CROSS and m.target == (2, "/a") and m.replicas_after == (2, 3)


def test_the_soft_limit_is_the_one_a_plan_brings_dirs_above_and_targets_never_pass():
    v = view([Dir(1, "/a", 100 * M, 15 * M), Dir(1, "/b", 100 * M, 30 * M), Dir(2, "/a", 100 * M, 60 * M)],
             [Replica("t", 0, 1, "/a", 11 * M)], assignments={("t", 0): (1,)})
    p = plan(v, SOFT, NO_MARGIN, FAST)
    # /b would keep 19 MiB, below the 20 MiB soft limit: broker 2 takes it.
    assert p.dirs[0].why == "soft" and [m.target for m in p.moves] == [(2, "/a")]


def test_a_target_counts_its_growth_over_the_moves_duration():
    dirs = [Dir(1, "/a", 100 * M, 5 * M), Dir(1, "/b", 100 * M, 30 * M, growth=1 * M), Dir(2, "/a", 100 * M, 90 * M)]
    v = view(dirs, [Replica("t", 0, 1, "/a", 10 * M)], assignments={("t", 0): (1,)})
    # At 1 MiB/s the move takes 10 s, during which /b fills by 10 MiB: 30 - 10 - 10 = 10 MiB, at the limit + 5.
    assert plan(v, HARD, Margin("bytes", 5 * M), 1 * M).moves[0].target == (2, "/a")
    assert plan(v, HARD, Margin("bytes", 5 * M), FAST).moves[0].target == (1, "/b")


def test_moving_partitions_and_the_decision_topic_stay():
    v = view([Dir(1, "/a", 100 * M, 5 * M), Dir(1, "/b", 100 * M, 90 * M)],
             [Replica("t", 0, 1, "/a", 20 * M), Replica("t", 1, 1, "/a", 20 * M), Replica("t", 1, 1, "/b", 1, future=True),
              Replica("__quota_throttle_factors", 0, 1, "/a", 20 * M), Replica("u", 0, 1, "/a", 30 * M)],
             reassigning=frozenset({("t", 0)}), protected=frozenset({"__quota_throttle_factors"}))
    p = plan(v, HARD, NO_MARGIN, FAST)
    assert [(m.topic, m.partition) for m in p.moves] == [("u", 0)]
    assert {(s.topic, s.partition): s.why for s in p.skipped} == {
        ("t", 0): "already being moved", ("t", 1): "already being moved",
        ("__quota_throttle_factors", 0): "the decision topic: the decision depends on it"}


def test_a_dir_no_move_can_bring_back_is_said_so_with_suggestions_only():
    v = view([Dir(1, "/a", 100 * M, 1 * M), Dir(2, "/a", 100 * M, 14 * M)], [Replica("t", 0, 1, "/a", 50 * M)],
             assignments={("t", 0): (1,)})
    p = plan(v, HARD, NO_MARGIN, FAST)
    assert not p.moves and not p.dirs[0].resolved and "lack the room" in p.dirs[0].note
    assert any("retention" in s and "never deletes" in s for s in p.dirs[0].suggestions)


def test_an_offline_dir_is_reported_and_nothing_is_moved_off_it():
    v = view([Dir(1, "/a", None, None), Dir(1, "/b", 100 * M, 90 * M)], [])
    p = plan(v, HARD, NO_MARGIN, FAST)
    assert p.dirs[0].why == "offline" and not p.dirs[0].resolved and not p.moves


def test_within_the_predictive_horizon_a_dir_is_planned_before_it_reaches_a_limit():
    d = Dir(1, "/a", 100 * M, 40 * M, growth=0.1 * M)  # 30 MiB above the hard limit: 300 s
    (n,) = needs((d,), HARD, NO_MARGIN, 600)
    assert n.why == "predictive" and n.eta_seconds == 300 and n.goal == 10 * M + 60 * M
    assert needs((d,), HARD, NO_MARGIN, 0) == []


def test_a_dir_filling_faster_than_the_throttle_cannot_be_outpaced():
    d = Dir(1, "/a", 100 * M, 5 * M, growth=2 * M)
    (n,) = needs((d,), HARD, NO_MARGIN, 0)
    assert math.isinf(required_bytes(n, 1 * M)) and required_bytes(n, 4 * M) == 10 * M


def test_sizes_and_margins_parse_and_bad_ones_say_what_is_accepted():
    assert parse_size("64MiB") == Margin("bytes", 64 * M) and parse_size("1GB") == Margin("bytes", 1e9)
    assert parse_size("5%", percent=True) == Margin("ratio", 0.05)
    for bad in ("5%", "lots", "-3", "1XB"):
        try:
            parse_size(bad)
        except ValueError as exc:
            assert "not a size" in str(exc)
        else:
            raise AssertionError(bad)


def test_log_dirs_and_growth_are_read_from_describe_log_dirs():
    def results(avail, size):
        return [{"log_dir": "/a", "error_code": 0, "total_bytes": 100, "usable_bytes": avail,
                 "topics": [{"name": "t", "partitions": [{"partition_index": 0, "partition_size": size,
                                                          "is_future_key": False}]}]},
                {"log_dir": "/b", "error_code": 56, "total_bytes": -1, "usable_bytes": -1, "topics": []}]
    dirs, replicas = with_growth(log_dir_replicas(1, results(50, 10)), log_dir_replicas(1, results(40, 20)), 5)
    assert dirs == [Dir(1, "/a", 100, 40, 2.0), Dir(1, "/b", None, None, 0.0)]
    assert replicas == [Replica("t", 0, 1, "/a", 20, 2.0)]


def test_the_table_and_the_json_say_what_moves_from_where_to_where_and_why():
    v = view([Dir(1, "/a", 100 * M, 5 * M), Dir(1, "/b", 100 * M, 80 * M)], [Replica("t", 0, 1, "/a", 12 * M)])
    p = plan(v, HARD, NO_MARGIN, FAST)
    console = Console(width=200, record=True)
    console.print(as_tables(p))
    text = console.export_text()
    for word in ("what moves", "from", "to", "bytes", "why this one", "t-0", "broker 1 /a", "broker 1 /b", "12.0 MiB"):
        assert word in text
    raw = json.loads(as_json(p))
    assert raw["moves"][0]["from"] == {"broker": 1, "log_dir": "/a"} and raw["moved_bytes"] == 12 * M
    assert MovePlan.from_json(raw) == p


# ---- properties --------------------------------------------------------------------------------------------------

@given(st.lists(st.integers(1, 50), max_size=9), st.integers(0, 300))
def test_fewest_bytes_is_the_least_sum_that_covers_what_is_needed(sizes, required):
    best = min((sum(c) for n in range(len(sizes) + 1) for c in itertools.combinations(sizes, n)
                if sum(c) >= required), default=None)
    chosen = fewest_bytes(sizes, required)
    assert (chosen is None) == (best is None)
    if chosen is not None:
        assert sum(sizes[i] for i in chosen) == best and len(set(chosen)) == len(chosen)


@st.composite
def clusters(draw, ample: bool = False):
    """2 to 4 brokers (racks some of them), 1 to 3 dirs each, partitions of 1 to 3 replicas on distinct brokers.
    `ample`: every dir but broker 1's first is large, and broker 1 has another dir (every replica has a place)."""
    n = draw(st.integers(2, 4))
    racks = {b: draw(st.sampled_from([None, "r1", "r2", "r3"])) for b in range(1, n + 1)}
    dirs = []
    for b in racks:
        for i in range(draw(st.integers(2 if ample and b == 1 else 1, 3))):
            total = 1000 * M if ample and (b, i) != (1, 0) else 100 * M
            dirs.append(Dir(b, f"/d{i}", total, 0, growth=draw(st.sampled_from([0.0, 0.0, 1000.0]))))
    replicas, assignments = [], {}
    for p in range(draw(st.integers(1, 8))):
        topic = draw(st.sampled_from(["t", "u", "__quota_throttle_factors"]))
        brokers = draw(st.lists(st.sampled_from(sorted(racks)), min_size=1, max_size=3, unique=True))
        if (topic, p) in assignments:
            continue
        assignments[topic, p] = tuple(brokers)
        size = draw(st.integers(1, 30)) * M
        for b in brokers:
            path = draw(st.sampled_from([d.path for d in dirs if d.broker == b]))
            replicas.append(Replica(topic, p, b, path, size, growth=draw(st.sampled_from([0.0, 500.0]))))
    used = {d.key: sum(r.size for r in replicas if (r.broker, r.path) == d.key) for d in dirs}
    spare = {d.key: draw(st.integers(0, 60)) * M for d in dirs}
    # Available = the spare drawn (the rest of the dir holds other data): small ones need a plan.
    dirs = [Dir(d.broker, d.path, max(d.total, used[d.key] + spare[d.key]),
                spare[d.key] if d.total < 1000 * M else d.total - used[d.key], d.growth) for d in dirs]
    moving = frozenset(k for k in assignments if draw(st.booleans()) and draw(st.booleans()))
    return ClusterView("c", racks, tuple(dirs), tuple(replicas), assignments, moving,
                       frozenset({"__quota_throttle_factors"}))


LIMITS = st.sampled_from([HARD, SOFT, Limits(Limit("ratio", 0.1), Limit("ratio", 0.2))])
MARGINS = st.sampled_from([NO_MARGIN, Margin("bytes", 2 * M), Margin("ratio", 0.02)])
RATES = st.sampled_from([FAST, 1 * M])


@hsettings(max_examples=300, deadline=None)
@given(clusters(), LIMITS, MARGINS, RATES)
def test_no_target_goes_past_its_own_limit_counting_its_growth_during_the_moves(v, limits, margin, rate):
    p = plan(v, limits, margin, rate)
    sources = {(d.broker, d.log_dir) for d in p.dirs}
    by_target: dict = {}
    for m in p.moves:
        by_target.setdefault(m.target, []).append(m)
    for key, moves in by_target.items():
        d = v.dir(*key)
        assert key not in sources and not d.offline
        load = Load(sum(m.size for m in moves), sum(m.growth for m in moves), max(m.duration_seconds for m in moves))
        assert target_after(d, load, None, 0) >= goal_bytes(d, limits, margin) - 1e-6


@hsettings(max_examples=300, deadline=None)
@given(clusters(), LIMITS, MARGINS, RATES)
def test_replicas_stay_on_distinct_brokers_and_as_many_racks_and_nothing_moving_or_protected_moves(v, limits, margin,
                                                                                                  rate):
    p = plan(v, limits, margin, rate)
    moved = [(m.topic, m.partition) for m in p.moves]
    assert len(moved) == len(set(moved))  # once each
    for m in p.moves:
        assert (m.topic, m.partition) not in v.moving and m.topic not in v.protected
        assert len(set(m.replicas_after)) == len(m.replicas_after) == len(m.replicas_before)
        assert m.replicas_before == v.assignments[m.topic, m.partition]

        def racks(bs):
            return len({v.racks[b] or f"broker-{b}" for b in bs})
        assert racks(m.replicas_after) >= racks(m.replicas_before)
        assert (m.kind == INTRA) == (m.source[0] == m.target[0])
        assert v.dir(*m.source) is not None and v.dir(*m.target) is not None
    for d in p.dirs:
        if d.resolved:
            assert d.after >= d.goal - 1


@hsettings(max_examples=300, deadline=None)
@given(clusters(ample=True), LIMITS, MARGINS)
def test_with_room_everywhere_a_dir_moves_the_fewest_bytes_that_bring_it_back(v, limits, margin):
    """Only broker 1's first dir is small: with every target roomy the plan's bytes are the brute-force minimum."""
    p = plan(v, limits, margin, FAST)
    for d in p.dirs:
        movable = [r.size for r in v.replicas if (r.broker, r.path) == (d.broker, d.log_dir) and not r.future
                   and r.tp not in v.moving and r.topic not in v.protected]
        growth = v.dir(d.broker, d.log_dir).growth  # it keeps filling while the moves run (required_bytes)
        need = math.ceil((d.goal - d.available) / (1 - growth / FAST))
        best = min((sum(c) for n in range(len(movable) + 1) for c in itertools.combinations(movable, n)
                    if sum(c) >= need), default=None)
        freed = sum(m.size for m in p.moves if m.source == (d.broker, d.log_dir))
        if best is None:
            assert not d.resolved
        elif len(p.dirs) == 1:
            assert d.resolved and freed == best
