"""A remedy state file that asks for more than a plan can contain (a config other than its throttles, a move that
changes a replication factor, a broker or dir the cluster lacks) is refused by --execute, its resume, --abort and
showing it, with one line naming the file, and no request reaches the cluster."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings

from quota_pipeline import cli
from quota_pipeline.commands import remedy as command
from quota_pipeline.enforce.baseline import BaselineError
from quota_pipeline.remedy import planner, throttles, vet
from quota_pipeline.remedy.plan import CROSS, FORMAT_VERSION, Forbidden, Move, MovePlan
from quota_pipeline.remedy.state import RemedyFile, RemedyState
from quota_pipeline.remedy.throttles import FOLLOWER_RATE, LEADER_RATE, LEADER_REPLICAS, Setting
from tests.unit.test_remedy_execute import FakeCluster, conf, config_file, executor, serve_as_admin  # noqa: F401 (config_file: a fixture)
from tests.unit.test_remedy_plan import LIMITS, MARGINS, clusters

M = 2 ** 20
RATE = 10 * M
SENDS = ("alter", "reassign", "move_within")


def payments() -> FakeCluster:
    """Brokers 1-3, `payments-0` on all three (RF 3); the operator's retention.ms and min.insync.replicas, and an
    operator's replication throttle on broker 2."""
    c = FakeCluster({1: None, 2: None, 3: None}, {(1, "/a"): 100 * M, (1, "/b"): 100 * M, (2, "/a"): 100 * M,
                                                  (3, "/a"): 100 * M})
    c.add("payments", 0, 4 * M, [(1, "/a"), (2, "/a"), (3, "/a")])
    c.values["topic", "payments"] = {"retention.ms": "86400000"}
    c.values["broker", "1"] = {"min.insync.replicas": "2"}
    c.values["broker", "2"] = {LEADER_RATE: "999"}
    return c


def move(before=(1, 2, 3), after=(4, 2, 3), source=(1, "/a"), target=(4, "/a"), topic="payments", partition=0):
    return Move(topic, partition, 4 * M, 0.0, source, target, tuple(before), tuple(after), 1.0, "planted")


INTRA = move(after=(1, 2, 3), target=(1, "/b"))
SOUND_OURS = [{"kind": "broker", "name": "1", "key": throttles.INTRA_RATE, "value": str(RATE), "entries": []}]


def state_json(moves=(INTRA,), ours=SOUND_OURS, cluster="c1", rate=RATE) -> dict:
    plan = MovePlan(cluster, rate, "2%", (), tuple(moves))
    return {"format_version": FORMAT_VERSION, "started_at": time.time(), "plan": plan.to_json(), "ours": list(ours)}


RETENTION = {"kind": "topic", "name": "payments", "key": "retention.ms", "value": "1", "entries": []}
MIN_ISR = {"kind": "broker", "name": "1", "key": "min.insync.replicas", "value": "1", "entries": []}
# The file of the report: retention.ms=1, min.insync.replicas=1 and payments-0 onto the single replica [9].
REPORTED = state_json([move(after=(9,), target=(9, "/a"))], [RETENTION, MIN_ISR])

PLANTED = {
    "the reported file": (REPORTED, "asks for retention.ms on topic payments, which remedy never sets"),
    "retention.ms": (state_json(ours=[*SOUND_OURS, RETENTION]), "asks for retention.ms on topic payments"),
    "min.insync.replicas": (state_json(ours=[MIN_ISR]), "asks for min.insync.replicas on broker 1, which remedy"),
    "a cluster config": (state_json(ours=[{**MIN_ISR, "kind": "cluster", "key": LEADER_RATE}]),
                         "on cluster 1, which remedy never sets"),
    "a throttle of every replica": (state_json(ours=[{"kind": "topic", "name": "payments", "key": LEADER_REPLICAS,
                                                      "entries": ["*"]}]), "not a list of partition:broker entries"),
    "an operator's throttle": (state_json(ours=[{**SOUND_OURS[0], "name": "2", "key": LEADER_RATE,
                                                 "value": "999"}]), "which its plan's moves do not need"),
    "RF 3 to 1": (state_json([move(after=(2,), target=(2, "/a"))]), "from replicas [1, 2, 3] to [2], which changes"),
    "a replica list claimed": (state_json([move(before=(1,), after=(2,), target=(2, "/a"))]),
                               "which changes its replication factor (3 now)"),
    "broker 9": (state_json([move(after=(9, 2, 3), target=(9, "/a"))]), "to broker 9, which is not an active broker"),
    "a replica twice": (state_json([move(after=(2, 2, 3), target=(2, "/a"))]), "which lists a broker twice"),
    "a dir broker 1 lacks": (state_json([move(after=(1, 2, 3), target=(1, "/nope"))]),
                             "with /nope, which is not one of its log dirs"),
    "a partition the cluster lacks": (state_json([move(partition=7, after=(1, 2, 3), target=(1, "/b"))]),
                                      "asks to move payments-7, which is not a partition of the cluster"),
    "another cluster's plan": (state_json(cluster="west"), "holds a plan for cluster west, not for c1"),
    "a zero throttle": (state_json(rate=0.5), "asks for a throttle of 0.5 bytes/s"),
    "a partition as text": (json.loads(json.dumps(state_json()).replace('"partition": 0', '"partition": "0"')),
                            "partition is '0', not int"),
}


@pytest.fixture
def cluster(monkeypatch):
    return serve_as_admin(monkeypatch, payments())


def set_values(c: FakeCluster) -> dict:
    return {k: dict(v) for k, v in c.values.items() if v}


def plant(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "remedy" / "c1.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize("flag", ["--execute", "--abort", "--json"])
@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_state_is_refused_with_one_line_naming_it_and_nothing_is_sent(config_file, cluster, tmp_path,
                                                                                capsys, flag, case):
    raw, message = PLANTED[case]
    path = plant(tmp_path, raw)
    before = set_values(cluster)
    assert cli.main(["remedy", config_file, "--sample", "0", flag, "--interval", "0.01"]) == command.EXIT_FAILED
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(f"error: the remedy state file {path} ") and message in err, err
    assert "Traceback" not in err and "resuming" not in out and "aborted" not in out
    assert [c for c in cluster.calls if c[0] in SENDS] == []
    assert set_values(cluster) == before and cluster.replica_sets["payments", 0] == (1, 2, 3)
    assert path.exists()  # left for the operator to look at


def test_the_reported_file_says_what_it_asks_for_and_what_to_do(config_file, cluster, tmp_path, capsys):
    path = plant(tmp_path, REPORTED)
    assert cli.main(["remedy", config_file, "--execute"]) == command.EXIT_FAILED
    assert capsys.readouterr().err == (f"error: the remedy state file {path} asks for retention.ms on topic payments, "
                                       "which remedy never sets: nothing was sent; check the file and delete it\n")


def test_a_planted_move_is_refused_by_the_executor_itself_before_any_request(cluster, tmp_path):
    store = RemedyFile(tmp_path / "state.json")
    store.path.write_text(json.dumps(state_json([move(after=(2,), target=(2, "/a"))])))
    state = store.load()
    ex = executor(cluster, tmp_path)
    for step in (ex.execute, ex.abort, lambda s: ex.apply(s, ex.view())):
        with pytest.raises(BaselineError, match="changes its replication factor"):
            step(state)
    assert [c for c in cluster.calls if c[0] in SENDS] == []


def test_no_setting_can_name_a_config_remedy_never_sets():
    for kind, key in (("topic", "retention.ms"), ("topic", "retention.bytes"), ("broker", "min.insync.replicas"),
                      ("topic", "cleanup.policy"), ("broker", "log.retention.ms"), ("topic", FOLLOWER_RATE)):
        with pytest.raises(Forbidden, match="which remedy never sets"):
            Setting(kind, "1" if kind == "broker" else "payments", key, "1")


@hsettings(max_examples=200, deadline=None)
@given(clusters(), LIMITS, MARGINS)
def test_every_plan_the_planner_makes_passes_the_check(v, limits, margin):
    plan = planner.plan(v, limits, margin, RATE)
    for cordon in (False, True):
        p = MovePlan(plan.cluster, plan.rate, plan.margin, plan.dirs, plan.moves, plan.skipped, cordon)
        vet.check(RemedyState(p, tuple(throttles.wanted(p)), 0.0), v)
        assert all(m.kind != CROSS or len(m.replicas_after) == len(v.assignments[m.topic, m.partition])
                   for m in p.moves)
