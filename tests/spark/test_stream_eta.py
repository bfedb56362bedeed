"""Issue 21's acceptance, on the streaming job itself: the real query (kafka_volumes source polling simulators,
transformWithState carrying the ETA buckets between micro-batches) in the test session's Spark, its records
collected instead of published. A disk that fills steadily sees its factor start to fall about one horizon before
the hard limit and stay below 1 until then; a cluster whose disk follows a steady retention sawtooth (the
simulator's timeline) is never throttled, though the record's short fit reads its falling edges as fills."""
from __future__ import annotations

import json
import time

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.simulator import Simulator
from quota_pipeline.streaming.metrics import listed
from tests.support.stream_session import job_in_session

GB = 10 ** 9
TOTAL = 100 * GB
HARD = 10 * GB
HORIZON_S = 10
FILL = 1 * GB        # bytes/s of the steady fill, started once the job decides
PERIOD = 2.0         # seconds between the sawtooth's retention passes (= one bucket of the 12 s window)
TOOTH = 5 * GB       # bytes written, then deleted, per period


def sawtooth(seconds: float, available_low: float = 25 * GB) -> list[dict]:
    """A simulator timeline: used bytes rise by TOOTH over each PERIOD and fall back at its end (retention)."""
    low_used = TOTAL - available_low - TOOTH
    points, t = [], 0.0
    while t < seconds:
        points += [{"at": t, "used_bytes": low_used}, {"at": t + PERIOD - 0.001, "used_bytes": low_used + TOOTH}]
        t += PERIOD
    return points


def _config(tmp_path, name: str, sim: Simulator) -> cfg.Config:
    return cfg.parse({
        cfg.HARD_BYTES: str(HARD), cfg.CHECK_INTERVAL_ISO: "PT1S", cfg.VALIDITY: "PT30S",
        cfg.ETA_HORIZON: f"PT{HORIZON_S}S", cfg.ETA_WINDOW: "PT12S", cfg.BOOTSTRAP: sim.bootstrap_servers,
        cfg.ADMIN_PREFIX + "request.timeout.ms": "700", cfg.CLUSTER_NAME: name,
        cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint"),
        cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers": "127.0.0.1:1",  # never reached: _Collect publishes
    })


@pytest.fixture
def story(spark, tmp_path, monkeypatch):
    filling = Simulator({"cluster_id": "filling", "brokers": 2, "log_dirs": 1,
                         "defaults": {"total_bytes": TOTAL, "available_bytes": 40 * GB}}, port=0).start()
    steady = Simulator({"cluster_id": "steady", "brokers": [{"log_dirs": [
        {"path": "/data", "total_bytes": TOTAL, "used_ratio": 0.5, "timeline": sawtooth(600)}]}]}, port=0).start()
    try:
        with job_in_session(spark, [_config(tmp_path, "filling", filling), _config(tmp_path, "steady", steady)],
                            monkeypatch) as rows:
            deadline = time.time() + 180
            while not {r.key for r in rows} >= {"filling", "steady"} and time.time() < deadline:
                time.sleep(0.2)
            assert {r.key for r in rows} >= {"filling", "steady"}, "the job published no decision within 180 s"
            started = len(rows)
            filling.state.set_fill_rate(1, 0, FILL)   # 30 GB above the hard limit: reached in 30 s
            deadline = time.time() + 90
            while not any(r.key == "filling" and r.throttle_factor == 0.0 for r in rows[started:]) and \
                    time.time() < deadline:
                time.sleep(0.2)
            time.sleep(2)
            yield [r for r in rows[started:]]
    finally:
        filling.stop()
        steady.stop()


def test_a_steady_fill_is_slowed_about_one_horizon_before_the_limit_and_a_sawtooth_never(story):
    filling = [r for r in story if r.key == "filling"]
    stop = next(r.observed_at for r in filling if r.throttle_factor == 0.0)
    first = next(r.observed_at for r in filling if r.throttle_factor < 1.0)
    lead = (stop - first).total_seconds()
    assert 0.5 * HORIZON_S <= lead <= 1.5 * HORIZON_S, [(r.observed_at, r.throttle_factor) for r in filling]
    # Slowed from then on until the limit, not stopped at once: production went on at a falling fraction.
    before = [r.throttle_factor for r in filling if first <= r.observed_at < stop]
    assert all(f < 1.0 for f in before) and any(0.0 < f < 1.0 for f in before), before
    steady = [r for r in story if r.key == "steady"]
    assert len(steady) >= 10 and {r.throttle_factor for r in steady} == {1.0}
    # The test can fail: the job saw the teeth (readings a tooth apart), and the record's short fit over the last
    # readings took falling edges for fills.
    seen = [listed(r.volumes)[0][3] for r in steady]
    assert max(seen) - min(seen) > TOOTH / 2, seen
    rates = [v["fill_rate_bytes_per_second"] for r in steady for v in json.loads(r.value)["closest_volumes"]]
    assert any(rate is not None and rate > 0 for rate in rates), rates
