"""bench/strimzi_compare.py's outcome of the stop and offline scenarios on synthetic producer histories: whether and
when the throttle was released while node 1 was gone, and the tables a user reads (no Kafka needed)."""
from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

from bench.strimzi_compare import Marks, Outcome, held_table, java_targets, main, outcome, table
from tests.realkafka_fleet import Client


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


def stop_outcome(rate_at, kind: str = "librdkafka") -> Outcome:
    # Filled at 60, throttled at 70, node 1 stopped at 75, freed at 240 (a 180 s stop).
    clients = [client(kind, rate_at) for _ in range(2)]
    marks = Marks(filled=60.0, freed=240.0, throttled=70.0, condition=75.0, restarted=250.0)
    return outcome("strimzi", "2", kind, "stop", clients, 2e6, marks, 100.0, SimpleNamespace(node_ids=[1, 2, 3]))


def throttled_then(after_stop):
    """1 MB/s per client before the fill, 1 % from 65 s, then `after_stop(t)` from node 1's stop, 1 MB/s after
    the free."""
    return lambda t: 1e6 if t < 65 or t >= 240 else 1e4 if t < 75 else after_stop(t)


def test_a_throttle_released_while_node_1_is_stopped_is_reported_with_when():
    o = stop_outcome(throttled_then(lambda t: 8e5 if t >= 92 else 1e4))  # back at 80 % from 17 s after the stop
    # The first 5 s window with half the earlier rate starts ~3.9 s before the producers come back.
    assert 12.0 <= o.released_s <= 17.0
    assert o.peak_share > 0.75
    assert o.condition_s == 15.0 and o.throttled_s == 10.0 and o.restarted_s == 10.0
    assert len(o.held_rates) == 33  # 165 s in 5 s steps
    assert o.held_rates[0] < 0.05 * 2e6 and o.held_rates[-1] > 0.7 * 2e6
    assert "after 1" in held_table([o]) and "| stop | strimzi | 2 | 2 librdkafka |" in held_table([o])


def test_a_throttle_that_holds_is_reported_held():
    o = stop_outcome(throttled_then(lambda t: 3e4))  # 3 % all along
    assert o.released_s is None
    assert 0.02 < o.held_share < 0.04 and o.peak_share < 0.05
    assert "| held |" in held_table([o])


def test_tables_name_the_client_kind_and_the_java_target():
    o = stop_outcome(throttled_then(lambda t: 1e4), kind="java")
    assert "| stop | strimzi | 2 | 2 java |" in table([o])
    fill_ok = Outcome(**{**asdict(o), "system": "quota-pipeline", "setting": "PT60S", "scenario": "fill",
                         "admitted_share": 0.03, "back_max_s": 9.0})
    fill_slow = Outcome(**{**asdict(fill_ok), "back_max_s": 21.0})
    assert held_table([fill_ok]) == ""
    assert [line.endswith(v) for line, v in zip(java_targets([fill_ok, fill_slow, o]), ("met", "missed"))] == \
        [True, True]


def test_outcomes_of_runs_before_the_scenarios_are_read_as_fill_with_librdkafka(tmp_path, capsys):
    earlier = {k: v for k, v in asdict(stop_outcome(throttled_then(lambda t: 1e4))).items()
               if k in ("system", "setting", "clients", "pre_rate", "cut_s", "cut5_s", "level", "admitted_share",
                        "admitted_rate", "last20_share", "model_rate", "back_min_s", "back_max_s", "not_back",
                        "describe_log_dirs_per_min", "decision_seen_s")}
    path = tmp_path / "old.json"
    path.write_text(json.dumps([earlier]))
    assert main(["--from-json", str(path)]) == 0
    assert "| fill | strimzi | 2 | 2 librdkafka |" in capsys.readouterr().out


def test_an_unknown_scenario_is_a_one_line_error(capsys):
    assert main(["--scenarios", "fill,crash"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --scenarios takes fill, stop and offline")
