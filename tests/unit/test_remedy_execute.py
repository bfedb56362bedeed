"""`remedy --execute` against a fake cluster that moves replicas as Kafka does (a future replica copied on the same
broker, a reassignment adding the target and dropping the source): it applies the plan, follows it, takes back
exactly the throttles it set, and an interrupted or crashed run is resumed (or aborted) by running it again."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quota_pipeline import cli
from quota_pipeline.commands import remedy as command
from quota_pipeline.core import config as cfg
from quota_pipeline.remedy import planner
from quota_pipeline.remedy.executor import Executor
from quota_pipeline.remedy.gather import CORDON_KEY, read_view
from quota_pipeline.remedy.need import Margin
from quota_pipeline.remedy.progress import DONE, RUNNING, state_of
from quota_pipeline.remedy.state import RemedyFile
from quota_pipeline.remedy.throttles import FOLLOWER_RATE, INTRA_RATE, LEADER_RATE, LEADER_REPLICAS

M = 2 ** 20
DYNAMIC = {"broker": "DYNAMIC_BROKER_CONFIG", "topic": "DYNAMIC_TOPIC_CONFIG"}
KNOWN = (LEADER_RATE, FOLLOWER_RATE, INTRA_RATE, "leader.replication.throttled.replicas",
         "follower.replication.throttled.replicas")


@dataclass
class FakeCluster:
    """Brokers with dirs of `total` bytes; a dir's available bytes = total - other data - its replicas' sizes.
    Every DescribeLogDirs round copies `step` bytes of each move in progress."""

    racks: dict[int, str | None]
    dirs: dict[tuple[int, str], int]  # (broker, path) -> total
    other: dict[tuple[int, str], int] = field(default_factory=dict)  # bytes that are not partitions
    placed: dict[tuple[str, int, int], str] = field(default_factory=dict)  # (topic, partition, broker) -> path
    sizes: dict[tuple[str, int], int] = field(default_factory=dict)
    replica_sets: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    future: dict[tuple[str, int, int], list] = field(default_factory=dict)  # -> [path, copied]
    moving: dict[tuple[str, int], list] = field(default_factory=dict)  # -> [new replicas, target, copied]
    preferred: dict[tuple[str, int, int], str] = field(default_factory=dict)
    values: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    cordon_supported: bool = False
    step: int = 4 * M
    calls: list = field(default_factory=list)

    def add(self, topic: str, partition: int, size: int, where: list[tuple[int, str]]) -> None:
        self.sizes[topic, partition] = size
        self.replica_sets[topic, partition] = tuple(b for b, _ in where)
        for b, path in where:
            self.placed[topic, partition, b] = path

    # ---- the admin port ----
    def cluster(self):
        return "cid", dict(self.racks)

    def assignments(self):
        return dict(self.replica_sets)

    def reassignments(self):
        return {tp: {"replicas": list(v[0]), "adding_replicas": [v[1]], "removing_replicas": []}
                for tp, v in self.moving.items()}

    def log_dirs(self, brokers):
        self.advance()
        out = {}
        for b in brokers:
            out[b] = []
            for (db, path), total in sorted(self.dirs.items()):
                if db != b:
                    continue
                parts = [(t, p, self.sizes[t, p], False) for (t, p, pb), pp in self.placed.items() if pb == b and pp == path]
                parts += [(t, p, c, True) for (t, p, pb), (fp, c) in self.future.items() if pb == b and fp == path]
                parts += [(t, p, v[2], False) for (t, p), v in self.moving.items() if v[1] == b
                          and self.preferred.get((t, p, b), self.first_dir(b)) == path]
                used = self.other.get((b, path), 0) + sum(s for *_, s, _ in parts)
                out[b].append({"log_dir": path, "error_code": 0, "total_bytes": total, "usable_bytes": total - used,
                               "topics": [{"name": t, "partitions": [{"partition_index": p, "partition_size": s,
                                                                      "is_future_key": f}]} for t, p, s, f in parts]})
        return out

    def first_dir(self, b):
        return min(p for db, p in self.dirs if db == b)

    def advance(self):
        for key, (path, copied) in list(self.future.items()):
            copied = min(self.sizes[key[:2]], copied + self.step)
            if copied >= self.sizes[key[:2]]:
                del self.future[key]
                self.placed[key] = path
            else:
                self.future[key] = [path, copied]
        for tp, (new, target, copied) in list(self.moving.items()):
            copied = min(self.sizes[tp], copied + self.step)
            if copied >= self.sizes[tp]:
                del self.moving[tp]
                for b in self.replica_sets[tp]:
                    if b not in new:
                        del self.placed[tp + (b,)]
                self.placed[tp + (target,)] = self.preferred.pop(tp + (target,), self.first_dir(target))
                self.replica_sets[tp] = tuple(new)
            else:
                self.moving[tp] = [new, target, copied]

    def move_within(self, moves):
        self.calls.append(("move_within", dict(moves)))
        out = {}
        for (t, p, b), path in moves.items():
            if (t, p, b) not in self.placed:
                self.preferred[t, p, b] = path
                out[t, p, b] = "ReplicaNotAvailableError"
            elif self.placed[t, p, b] == path:
                self.future.pop((t, p, b), None)  # back to where it is: the copy is cancelled
                out[t, p, b] = None
            else:
                self.future.setdefault((t, p, b), [path, 0])
                out[t, p, b] = None
        return out

    def reassign(self, replicas):
        self.calls.append(("reassign", dict(replicas)))
        for tp, new in replicas.items():
            if new is None:
                self.moving.pop(tp, None)
            elif tuple(new) != self.replica_sets[tp]:
                (target,) = set(new) - set(self.replica_sets[tp])
                self.moving.setdefault(tp, [tuple(new), target, 0])
        return {tp: None for tp in replicas}

    def configs(self, resources, keys):
        out = {}
        for kind, name in resources:
            have = self.configs_of(kind, name)
            known = [k for k in keys if k in KNOWN or (k == CORDON_KEY and self.cordon_supported)]
            out[kind, name] = {k: (have[k], DYNAMIC[kind]) if k in have else (None, "DEFAULT_CONFIG") for k in known}
        return out

    def configs_of(self, kind, name):
        return self.values.setdefault((kind, name), {})

    def alter(self, changes):
        self.calls.append(("alter", list(changes)))
        for kind, name, key, op, value in changes:
            have = self.configs_of(kind, name)
            entries = [e for e in have.get(key, "").split(",") if e]
            if op == "SET":
                have[key] = value
            elif op == "DELETE":
                have.pop(key, None)
            elif op == "APPEND":
                have[key] = ",".join(entries + [e for e in value.split(",") if e not in entries])
            elif op == "SUBTRACT":
                left = [e for e in entries if e not in value.split(",")]
                have[key] = ",".join(left)  # as Kafka: an empty list stays set





def conf(tmp_path: Path, **extra: str) -> cfg.Config:
    return cfg.parse({cfg.BOOTSTRAP: "localhost:9092", cfg.HARD_BYTES: str(10 * M), cfg.CHECKPOINT_PATH: str(tmp_path),
                      cfg.CLUSTER_NAME: "c1", **extra})


def two_dirs() -> FakeCluster:
    """Broker 1's /a holds 30 MiB of `t` and is past the 10 MiB hard limit; /b has room."""
    c = FakeCluster({1: None, 2: None}, {(1, "/a"): 100 * M, (1, "/b"): 100 * M, (2, "/a"): 100 * M},
             other={(1, "/a"): 65 * M, (1, "/b"): 10 * M, (2, "/a"): 10 * M})
    c.add("t", 0, 12 * M, [(1, "/a")])
    c.add("t", 1, 18 * M, [(1, "/a")])
    return c


def cross_only() -> FakeCluster:
    """Broker 1 has one dir, past its limit; `u` has replicas on brokers 1 and 3, broker 2 has room."""
    c = FakeCluster({1: "r1", 2: "r2", 3: "r3"}, {(1, "/a"): 100 * M, (2, "/a"): 100 * M, (2, "/b"): 100 * M, (3, "/a"): 100 * M},
             other={(1, "/a"): 75 * M, (2, "/a"): 70 * M, (2, "/b"): 10 * M, (3, "/a"): 10 * M})
    c.add("u", 0, 16 * M, [(1, "/a"), (3, "/a")])
    c.add("u", 1, 4 * M, [(1, "/a"), (3, "/a")])
    return c


def executor(cluster: FakeCluster, tmp_path: Path, **kw: Any) -> Executor:
    return Executor(cluster, conf(tmp_path), RemedyFile(tmp_path / "state.json"), say=lambda _: None,
                    interval=0, sleep=lambda _: None, **kw)


def make_plan(cluster: FakeCluster, tmp_path: Path):
    return planner.plan(read_view(cluster, conf(tmp_path)), conf(tmp_path).limits, Margin("bytes", 5 * M), 10 * M)


def test_an_intra_broker_plan_runs_to_the_end_and_leaves_no_throttle(tmp_path):
    c = two_dirs()
    plan = make_plan(c, tmp_path)
    assert [(m.topic, m.partition, m.target) for m in plan.moves] == [("t", 0, (1, "/b"))]
    ex = executor(c, tmp_path)
    states = ex.execute(ex.begin(plan))
    assert set(states.values()) == {DONE} and c.placed["t", 0, 1] == "/b"
    assert any(op == "alter" and (("broker", "1", INTRA_RATE, "SET", str(10 * M)) in ch) for op, ch in c.calls)
    assert all(not v for v in c.values.values())  # every throttle it set is gone
    assert not (tmp_path / "state.json").exists()
    after = read_view(c, conf(tmp_path)).dir(1, "/a")
    assert after.available >= 15 * M


def test_a_cross_broker_plan_throttles_the_replicas_it_moves_and_records_the_target_dir(tmp_path):
    c = cross_only()
    plan = make_plan(c, tmp_path)
    (m,) = plan.moves
    assert (m.topic, m.partition, m.target, m.replicas_after) == ("u", 0, (2, "/b"), (2, 3))
    ex = executor(c, tmp_path)
    state = ex.begin(plan)
    ex.apply(state, ex.view())
    assert c.values["topic", "u"][LEADER_REPLICAS] == "0:1,0:3"
    assert c.values["topic", "u"]["follower.replication.throttled.replicas"] == "0:2"
    assert {b for (kind, b), v in c.values.items() if kind == "broker" and v.get(LEADER_RATE)} == {"1", "2", "3"}
    ex.follow(state)
    ex.finish(state)
    assert c.replica_sets["u", 0] == (2, 3) and c.placed["u", 0, 2] == "/b"  # the dir the plan chose
    assert all(not v for v in c.values.values())


def test_it_takes_back_only_its_own_throttles(tmp_path):
    c = cross_only()
    c.values["broker", "2"] = {LEADER_RATE: "999"}  # an operator's, set before
    c.values["topic", "u"] = {LEADER_REPLICAS: "7:9"}
    ex = executor(c, tmp_path)
    state = ex.begin(make_plan(c, tmp_path))
    ex.apply(state, ex.view())
    assert c.values["broker", "2"][LEADER_RATE] == "999"  # not overwritten
    c.values["broker", "3"][LEADER_RATE] = "123"  # an operator changes one of ours while it runs
    ex.follow(state)
    ex.finish(state)
    assert c.values["broker", "2"] == {LEADER_RATE: "999"} and c.values["topic", "u"] == {LEADER_REPLICAS: "7:9"}
    assert c.values["broker", "3"] == {LEADER_RATE: "123"}  # theirs now: left
    assert not c.values["broker", "1"]


def test_an_interrupted_run_leaves_its_state_and_a_second_run_resumes_and_cleans_up(tmp_path):
    c = two_dirs()
    c.step = 2 * M
    plan = make_plan(c, tmp_path)
    stop = threading.Event()
    first = executor(c, tmp_path, stop=stop)
    first.sleep = lambda _: stop.set()  # interrupted after the first progress check
    states = first.execute(first.begin(plan))
    assert RUNNING in states.values()
    assert (tmp_path / "state.json").exists() and c.values["broker", "1"][INTRA_RATE] == str(10 * M)
    issued = [call for call in c.calls if call[0] == "move_within"]

    second = executor(c, tmp_path)
    state = RemedyFile(tmp_path / "state.json").load()
    assert state.plan == plan
    states = second.execute(state)
    assert set(states.values()) == {DONE}
    assert [call for call in c.calls if call[0] == "move_within"] == issued  # running: not issued again
    assert all(not v for v in c.values.values()) and not (tmp_path / "state.json").exists()


def test_a_crash_between_the_state_file_and_the_first_change_is_resumed(tmp_path):
    c = two_dirs()
    ex = executor(c, tmp_path)
    ex.begin(make_plan(c, tmp_path))  # written ahead; nothing changed on the cluster yet
    assert not c.calls
    states = executor(c, tmp_path).execute(RemedyFile(tmp_path / "state.json").load())
    assert set(states.values()) == {DONE} and all(not v for v in c.values.values())


def test_abort_cancels_the_running_moves_and_takes_back_the_throttles(tmp_path):
    c = cross_only()
    c.step = 1 * M
    ex = executor(c, tmp_path)
    state = ex.begin(make_plan(c, tmp_path))
    ex.apply(state, ex.view())
    assert state_of(state.plan.moves[0], ex.view()) == RUNNING
    ex.abort(state)
    assert not c.moving and c.replica_sets["u", 0] == (1, 3)
    assert all(not v for v in c.values.values()) and not (tmp_path / "state.json").exists()


def test_on_kafka_with_cordons_the_source_dir_is_cordoned_while_the_plan_runs(tmp_path):
    c = two_dirs()
    c.cordon_supported = True
    plan = make_plan(c, tmp_path)
    assert plan.cordon
    ex = executor(c, tmp_path)
    seen = []
    ex.sleep = lambda _: seen.append(c.values["broker", "1"].get(CORDON_KEY))
    c.step = 4 * M
    ex.execute(ex.begin(plan))
    assert seen and set(seen) == {"/a"}
    assert CORDON_KEY not in c.values["broker", "1"]


# ---- the command --------------------------------------------------------------------------------------------------

@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "c.properties"
    path.write_text(f"{cfg.BOOTSTRAP}=localhost:9092\n{cfg.HARD_BYTES}={10 * M}\n{cfg.CHECKPOINT_PATH}={tmp_path}\n"
                    f"{cfg.CLUSTER_NAME}=c1\n")
    return str(path)


def serve_as_admin(monkeypatch, cluster: FakeCluster) -> FakeCluster:
    """The command's RemedyAdmin answers with `cluster`."""

    class Admin:
        def __init__(self, *_a, **_k):
            pass

        def __enter__(self):
            return cluster

        def __exit__(self, *exc):
            return None
    monkeypatch.setattr(command, "RemedyAdmin", Admin)
    return cluster


@pytest.fixture
def fake(monkeypatch):
    return serve_as_admin(monkeypatch, two_dirs())


def test_the_command_prints_the_plan_as_json_and_changes_nothing(config_file, fake, capsys):
    assert cli.main(["remedy", config_file, "--sample", "0", "--json", "--margin", "5MiB"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert [(m["topic"], m["partition"]) for m in raw["moves"]] == [("t", 0)]
    assert not fake.calls


def test_the_command_executes_and_a_second_run_finds_nothing_to_do(config_file, fake, capsys):
    assert cli.main(["remedy", config_file, "--sample", "0", "--execute", "--interval", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "what moves" in out and "done: 1 of 1 move(s) done" in out
    assert cli.main(["remedy", config_file, "--sample", "0"]) == 0
    assert "nothing to move" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--margin", "lots"], "--margin/--throttle: not a size"),
    (["--throttle", "5%"], "--margin/--throttle: not a size"),
    (["--throttle", "0"], "--throttle must be 1 byte/s or more"),
    (["--execute", "--abort"], "give --execute or --abort, not both"),
    (["--sample", "-1"], "--sample must be 0 or more"),
])
def test_bad_input_fails_with_one_line(config_file, fake, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["remedy", config_file, *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err


def test_tail_shows_the_plan_of_a_cluster_with_a_dir_past_its_limit_and_says_when_none_is_needed(tmp_path):
    from rich.console import Console

    from quota_pipeline.dashboard.plans import PlanWatcher, render

    c = two_dirs()
    watcher = PlanWatcher(conf(tmp_path), lambda: c)
    seen = watcher.read_once(c)
    console = Console(width=200, record=True)
    console.print(render(seen))
    text = console.export_text()
    assert "remedy's plan for c1" in text and "t-0" in text and "broker 1 /b" in text
    ex = executor(c, tmp_path)
    ex.execute(ex.begin(seen.plan))
    console.print(render(watcher.read_once(c)))
    assert "every log dir is above its limit" in console.export_text()
    assert not c.calls[-1][0] == "reassign" and not watcher.read_once(c).plan.moves


def test_without_execute_an_unfinished_plan_is_shown_with_its_progress_and_abort_ends_it(config_file, fake, capsys,
                                                                                         tmp_path):
    fake.step = 1 * M
    ex = Executor(fake, conf(tmp_path), RemedyFile(tmp_path / "remedy" / "c1.json"), say=lambda _: None)
    state = ex.begin(make_plan(fake, tmp_path))
    ex.apply(state, ex.view())
    assert cli.main(["remedy", config_file, "--sample", "0"]) == 0
    out = capsys.readouterr().out
    assert "is not finished: moves: 1 running" in out and "--abort cancels it" in out
    assert cli.main(["remedy", config_file, "--abort"]) == 0
    assert "aborted" in capsys.readouterr().out
    assert not fake.future and not (tmp_path / "remedy" / "c1.json").exists()
    assert all(not v for v in fake.values.values())
    assert cli.main(["remedy", config_file, "--abort"]) == 0
    assert "no plan is running" in capsys.readouterr().out


def test_the_dashboard_serves_the_plan_only_when_started_with_it(tmp_path):
    from starlette.testclient import TestClient

    from quota_pipeline.dashboard.plans import PlanWatcher
    from quota_pipeline.dashboard.server import create_app

    c = two_dirs()
    watcher = PlanWatcher(conf(tmp_path), lambda: c)
    watcher.seen = watcher.read_once(c)
    base = "http://127.0.0.1:8404"
    body = TestClient(create_app(feed=object(), host="127.0.0.1", plans=watcher), base_url=base).get("/api/plan").json()
    assert body["enabled"] and body["error"] is None and [m["topic"] for m in body["plan"]["moves"]] == ["t"]
    assert TestClient(create_app(feed=object(), host="127.0.0.1"), base_url=base).get("/api/plan").json() == {
        "enabled": False}


# ---- property: only its own configs are taken back ------------------------------------------------------------

from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

from quota_pipeline.remedy import throttles  # noqa: E402
from tests.unit.test_remedy_plan import LIMITS, MARGINS, clusters  # noqa: E402


@hsettings(max_examples=200, deadline=None)
@given(clusters(), LIMITS, MARGINS, st.data())
def test_whatever_was_set_before_or_changed_during_stays_and_all_it_set_alone_goes(v, limits, margin, data):
    plan = planner.plan(v, limits, margin, 10 * M)
    want = throttles.wanted(plan.__class__(**{**plan.__dict__, "cordon": data.draw(st.booleans())}))
    store = FakeCluster({}, {}, cordon_supported=True)
    before = {}
    for s in want:  # an operator's settings, some of them, made before
        if data.draw(st.booleans()):
            value = ",".join(data.draw(st.lists(st.sampled_from(["0:1", "1:2", "9:9", "*"]), max_size=2, unique=True))) \
                if s.entries else data.draw(st.sampled_from(["1", "555", s.value]))
            if value:
                store.configs_of(*s.resource)[s.key] = before.setdefault((s.resource, s.key), value)
    ours = throttles.ours_to_set(want, store.configs(*throttles.resources(want)) if want else {})
    store.alter(throttles.to_apply(ours, store.configs(*throttles.resources(ours)) if ours else {}))
    changed = {}
    for s in want:  # and some changed while it ran
        if data.draw(st.integers(0, 4)) == 0:
            changed[s.resource, s.key] = store.configs_of(*s.resource)[s.key] = "777"
    store.alter(throttles.to_remove(ours, store.configs(*throttles.resources(ours)) if ours else {}))
    for s in want:
        now = store.configs_of(*s.resource).get(s.key)
        key = (s.resource, s.key)
        if key in changed:
            assert now == changed[key]
        elif s.entries:
            assert set((now or "").split(",")) - {""} == set((before.get(key) or "").split(",")) - {""}
        else:
            assert now == before.get(key)


def test_ctrl_c_stops_execute_even_where_the_code_it_lands_in_drops_what_it_raises(tmp_path, capsys):
    """kafka-python's event loop logs and drops what its tasks raise: a KeyboardInterrupt landing there was lost and
    `remedy --execute` went on to the end. Ctrl-C sets the executor's stop instead, checked between its steps."""
    import os
    import signal
    import time

    c = two_dirs()
    c.step = 2 * M
    plan = make_plan(c, tmp_path)
    run = executor(c, tmp_path)
    real_view = run.view

    def view_in_a_loop_that_drops_exceptions():
        try:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a request is on its way
            time.sleep(0.05)
        except BaseException:  # noqa: BLE001 - as kafka-python's loop does
            pass
        return real_view()

    run.view = view_in_a_loop_that_drops_exceptions
    before = signal.getsignal(signal.SIGINT)
    assert command.execute(run, run.begin(plan)) == command.EXIT_INTERRUPTED
    assert "run `quota-pipeline remedy --execute` again" in capsys.readouterr().err
    assert (tmp_path / "state.json").exists()  # resumable
    assert signal.getsignal(signal.SIGINT) is before
