"""bench/strimzi_compare.py's outcome of the stop and offline scenarios on synthetic producer histories: whether and
when the throttle was released while node 1 was gone, and the tables a user reads (no Kafka needed)."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.strimzi_compare import (
    Marks, Outcome, held_table, java_targets, main, outcome, refusal_table, table,
)
from harness.producers import Client


def client(kind: str, rate_at) -> Client:
    """A producer whose acknowledged bytes grow at `rate_at(t)` bytes/s, sampled every 0.25 s over t in [0, 300):
    the sample at t counts the bytes of (t - 0.25, t]."""
    c = Client(f"c-{kind}", kind, SimpleNamespace(stdout=iter(())))
    acked = 0.0
    for i in range(1200):
        t = i * 0.25
        acked += rate_at(t - 0.125) * 0.25
        c.times.append(t)
        c.acked.append(int(acked))
    return c


T0 = time.mktime((2026, 11, 25, 3, 0, 0, 0, 0, -1))  # the synthetic run's t = 0, local time as Kafka logs it


def cluster(tmp_path: Path, node_2_log: list[tuple[float, str]]) -> SimpleNamespace:
    """Three nodes whose node 2 logged `node_2_log` ((t, message) in the run's seconds) in server.log."""
    nodes = {n: SimpleNamespace(logs=tmp_path / f"node{n}-logs") for n in (1, 2, 3)}
    for node in nodes.values():
        node.logs.mkdir(parents=True, exist_ok=True)
    (nodes[2].logs / "server.log").write_text("".join(
        f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(T0 + t))},{int(t * 1000) % 1000:03d}] INFO {m}\n"
        for t, m in node_2_log))
    return SimpleNamespace(node_ids=[1, 2, 3], nodes=nodes)


def strimzi_change(old: float, new: float) -> str:
    return (f"Throttle Factor changed from ThrottleFactor{{throttleFactor={old}, source=POLICY, validFrom=x}} to "
            f"ThrottleFactor{{throttleFactor={new}, source=POLICY, validFrom=y}}, notifying listener "
            "(io.strimzi.kafka.quotas.throttle.PolicyBasedThrottle)")


def stop_outcome(rate_at, tmp_path: Path, kind: str = "librdkafka", node_2_log=(), system="strimzi") -> Outcome:
    # Filled at 60, throttled at 70, node 1 stopped at 75, freed at 240 (a 180 s stop).
    clients = [client(kind, rate_at) for _ in range(2)]
    for c in clients:
        c.times = [T0 + t for t in c.times]
    marks = Marks(filled=T0 + 60.0, freed=T0 + 240.0, throttled=T0 + 70.0, condition=T0 + 75.0,
                  restarted=T0 + 250.0)
    setting = "2" if system == "strimzi" else "PT60S"
    return outcome(system, setting, kind, "stop", clients, 2e6, marks, 100.0,
                   cluster(tmp_path, list(node_2_log)))


def throttled_then(after_stop):
    """1 MB/s per client before the fill, 1 % from 65 s, then `after_stop(t)` from node 1's stop, 1 MB/s after
    the free."""
    return lambda t: 1e6 if t < 65 or t >= 240 else 1e4 if t < 75 else after_stop(t)


def test_a_throttle_released_while_node_1_is_stopped_is_reported_with_when(tmp_path):
    # The producers are back at 80 % from 17 s after the stop.
    o = stop_outcome(throttled_then(lambda t: 8e5 if t >= 92 else 1e4), tmp_path)
    # The first 5 s window with half the earlier rate starts ~3.9 s before the producers come back.
    assert 12.0 <= o.released_s <= 17.0
    assert o.peak_share > 0.75
    assert o.condition_s == 15.0 and o.throttled_s == 10.0 and o.restarted_s == 10.0
    assert len(o.held_rates) == 33  # 165 s in 5 s steps
    assert o.held_rates[0] < 0.05 * 2e6 and o.held_rates[-1] > 0.7 * 2e6
    assert "after 1" in held_table([o]) and "| stop | strimzi | 2 | 2 librdkafka |" in held_table([o])


def test_the_brokers_release_is_read_from_either_callbacks_log(tmp_path):
    held = lambda t: 1e4  # noqa: E731
    strimzi = stop_outcome(throttled_then(held), tmp_path, node_2_log=[
        (62.0, strimzi_change(1.0, 0.0)), (94.5, strimzi_change(0.0, 1.0)), (241.0, strimzi_change(1.0, 0.0))])
    assert strimzi.factor_raised_s == 19.5
    assert "| after 19.5 s | held |" in held_table([strimzi])  # released by the brokers, no producer used it
    ours = stop_outcome(throttled_then(held), tmp_path / "ours", system="quota-pipeline", node_2_log=[
        (61.0, "throttle factor of bench is now 0.0 (node 1 below its limit)"),
        (245.0, "throttle factor of bench is now 1.0 (calm)")])
    assert ours.factor_raised_s is None  # the 1.0 came after the free
    assert "| held | held |" in held_table([ours])


def test_a_throttle_that_holds_is_reported_held(tmp_path):
    o = stop_outcome(throttled_then(lambda t: 3e4), tmp_path)  # 3 % all along
    assert o.released_s is None
    assert 0.02 < o.held_share < 0.04 and o.peak_share < 0.05
    assert "| held |" in held_table([o])


def test_tables_name_the_client_kind_and_the_java_target(tmp_path):
    o = stop_outcome(throttled_then(lambda t: 1e4), tmp_path, kind="java")
    assert "| stop | strimzi | 2 | 2 java |" in table([o])
    fill_ok = Outcome(**{**asdict(o), "system": "quota-pipeline", "setting": "PT60S", "scenario": "fill",
                         "admitted_share": 0.03, "back_max_s": 9.0})
    fill_slow = Outcome(**{**asdict(fill_ok), "back_max_s": 21.0})
    assert held_table([fill_ok]) == ""
    assert [line.endswith(v) for line, v in zip(java_targets([fill_ok, fill_slow, o]), ("met", "missed"))] == \
        [True, True]


def test_outcomes_of_runs_before_the_scenarios_are_read_as_fill_with_librdkafka(tmp_path, capsys):
    earlier = {k: v for k, v in asdict(stop_outcome(throttled_then(lambda t: 1e4), tmp_path)).items()
               if k in ("system", "setting", "clients", "pre_rate", "cut_s", "cut5_s", "level", "admitted_share",
                        "admitted_rate", "last20_share", "model_rate", "back_min_s", "back_max_s", "not_back",
                        "describe_log_dirs_per_min", "decision_seen_s")}
    path = tmp_path / "old.json"
    path.write_text(json.dumps([earlier]))
    assert main(["--from-json", str(path)]) == 0
    assert "| fill | strimzi | 2 | 2 librdkafka |" in capsys.readouterr().out


def test_an_unknown_scenario_is_a_one_line_error(capsys):
    assert main(["--scenarios", "fill,crash"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --scenarios takes fill, stop, offline and targeted")


def logged(tmp_path: Path, lines: dict[int, list[tuple[float, str]]]) -> SimpleNamespace:
    """Three nodes whose server.log holds `lines` ((t, message) per node, in the run's seconds)."""
    nodes = {n: SimpleNamespace(logs=tmp_path / f"node{n}-logs") for n in (1, 2, 3)}
    for n, node in nodes.items():
        node.logs.mkdir(parents=True, exist_ok=True)
        (node.logs / "server.log").write_text("".join(
            f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(T0 + t))},{int(t * 1000) % 1000:03d}] INFO {m}\n"
            for t, m in lines.get(n, [])))
    return SimpleNamespace(node_ids=[1, 2, 3], nodes=nodes)


def decision_line(factor: float) -> str:
    return (f"decision of bench observed at 2026-11-25T03:00:00Z: throttle factor {factor} (OBSERVATION, valid until "
            "x) (io.quotapipeline.callback.DecisionHolder)")


def refused_outcome(tmp_path: Path, leak: float, back_after: float, spare: bool = False) -> Outcome:
    """Filled at 60; the 0.0 reaches the nodes at 61.0-61.4; freed at 240, the 1.0 at 240.8-241.0; the load topic's
    clients write `leak` of their rate from 62.4 on, and are back `back_after` s after the first release line."""
    def rate_at(t: float) -> float:
        if t < 61.2:
            return 1e6
        if t < 240.8 + back_after:
            return leak * 1e6 if t >= 62.4 else 0.0
        return 1e6
    clients = [client("librdkafka", rate_at) for _ in range(2)]
    if spare:
        clients.append(client("librdkafka", lambda t: 1e6))
        clients[-1].client_id = "bench-spare-1"
    for c in clients:
        c.times = [T0 + t for t in c.times]
    cluster = logged(tmp_path, {n: [(60.9 + 0.2 * n, decision_line(0.0)), (240.6 + 0.2 * n, decision_line(1.0))]
                                for n in (1, 2, 3)})
    marks = Marks(filled=T0 + 60.0, freed=T0 + 240.0)
    return outcome("refuse", "topics", "librdkafka", "targeted" if spare else "fill", clients, 2e6 if not spare
                   else 3e6, marks, 100.0, cluster)


def test_the_refusing_stop_is_judged_from_the_nodes_lines_against_the_acceptance(tmp_path):
    ok = refused_outcome(tmp_path, leak=0.0, back_after=0.5)
    assert ok.stop_at_brokers_s == pytest.approx(1.5, abs=0.01)
    assert ok.admitted_after_stop_share == 0.0
    assert ok.release_at_brokers_s == pytest.approx(1.2, abs=0.01)
    assert ok.back_from_release_max_s == pytest.approx(0.5, abs=0.3)
    assert "| met |" in refusal_table([ok])
    leaky = refused_outcome(tmp_path / "leaky", leak=0.01, back_after=0.5)  # 1 % of the rate through the stop
    assert leaky.admitted_after_stop_share == pytest.approx(0.01, rel=0.05)
    assert "| missed |" in refusal_table([leaky])
    slow = refused_outcome(tmp_path / "slow", leak=0.0, back_after=3.0)
    assert slow.back_from_release_max_s > 2.0 and "| missed |" in refusal_table([slow])


def test_a_targeted_stop_counts_only_the_stopped_topics_clients_and_keeps_the_spare_topic(tmp_path):
    o = refused_outcome(tmp_path, leak=0.0, back_after=0.5, spare=True)
    assert o.admitted_after_stop_share == 0.0 and o.spare_share == pytest.approx(1.0, abs=0.01)
    assert "| met |" in refusal_table([o])
