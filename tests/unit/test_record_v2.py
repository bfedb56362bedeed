"""Record version 2: what an operator paged at night reads (ETA, closest volumes, top partitions, since when)."""
from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from dataclasses import replace

from tests.support.builders import GB, failed, ok, settings, vol
from tests.support.simulator_fixtures import start_simulator  # noqa: F401  (fixture)
from quota_pipeline import resources
from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import SYSTEM
from quota_pipeline.core.reference.decision import DecisionState, decide_all, step
from quota_pipeline.core.model import PartitionSize
from quota_pipeline.core.record import ThrottleDecision, build_record
from quota_pipeline.core.settings import Settings
from quota_pipeline.kafka.observer import Observer

MB = 10 ** 6


def test_eta_of_a_simulated_disk_filling_at_a_constant_rate_is_within_10_percent(start_simulator):
    """A simulated log dir fills at 200 MB/s (simulated time runs at wall speed, as the observer's clock);
    three polls in, its ETA is the true time to the hard limit."""
    total, used = 100 * GB, 80 * GB
    sim = start_simulator({"cluster_id": "eta", "speed": 1, "brokers": [
        {"id": 1, "log_dirs": [{"path": "/d0", "total_bytes": total, "used_bytes": used, "fill_rate": 200 * MB}]}]})
    conf = cfg.parse({cfg.BOOTSTRAP: sim.bootstrap_servers, cfg.HARD_RATIO: "0.05", cfg.VALIDITY: "PT5M"})
    s, state = Settings.of(conf), DecisionState()
    with Observer(conf) as observer:
        for _ in range(3):
            snap = observer.poll()
            summary, _ = step(state, snap, s)
            time.sleep(1.0)
    [near] = summary.closest_volumes[:1]
    reading = next(v for v in snap.volumes if v.log_dir == "/d0")
    truth = (reading.available_bytes - 0.05 * total) / (200 * MB)
    assert near.log_dir == "/d0" and near.eta_seconds is not None
    assert abs(near.eta_seconds - truth) <= 0.10 * truth, (near, truth)
    assert abs(near.fill_rate_bytes_per_second - 200 * MB) <= 20 * MB


def test_closest_volumes_rank_offline_first_then_headroom_and_carry_top_partitions():
    s = replace(settings(hard_bytes=10 * GB), closest_volumes=3)
    busy = replace(vol(2, 12 * GB, log_dir="/b"), top_partitions=(PartitionSize("orders", 3, 40 * GB),))
    [(summary, _)] = decide_all([ok(0, vol(1, 50 * GB), busy, vol(3, None), vol(4, 11 * GB))], s)
    assert [(c.broker_id, c.headroom_bytes) for c in summary.closest_volumes] == [(3, None), (4, GB), (2, 2 * GB)]
    assert summary.closest_volumes[2].top_partitions == (PartitionSize("orders", 3, 40 * GB),)
    assert all(c.eta_seconds is None for c in summary.closest_volumes)   # one reading: no rate yet


def test_throttled_since_marks_the_start_of_the_episode_and_clears_on_release():
    s = settings(validity_s=60)
    snaps = [ok(0, vol(1, 50 * GB)), ok(10, vol(1, 5 * GB)), failed(20), ok(30, vol(1, 4 * GB)),
             ok(40, vol(1, 50 * GB)), ok(50, vol(1, 5 * GB))]
    since = [d.throttled_since for _, d in decide_all(snaps, s)]
    t0 = snaps[0].observed_at
    assert since == [None, t0 + dt.timedelta(seconds=10), t0 + dt.timedelta(seconds=10),
                     t0 + dt.timedelta(seconds=10), None, t0 + dt.timedelta(seconds=50)]


def test_a_500_broker_record_is_well_under_64_kb_and_valid():
    parts = tuple(PartitionSize(f"topic-with-a-long-name-{i}", i, 10 * GB) for i in range(5))
    volumes = [replace(vol(b, (5 + b % 50) * GB, log_dir=f"/var/lib/kafka/data-{d}"), top_partitions=parts)
               for b in range(1, 501) for d in range(12)]
    s = settings(hard_bytes=10 * GB)
    state = DecisionState()
    step(state, ok(0, *volumes), s)
    summary, decision = step(state, ok(10, *[replace(v, available_bytes=v.available_bytes - GB) for v in volumes]), s)
    record = build_record(summary, decision, s, SYSTEM.now())
    text = json.dumps(record.to_json())
    assert len(text) < 16 * 1024, len(text)   # 6,000 log dirs, but only the closest few are listed
    assert resources.errors("throttle_decision", json.loads(text)) == []
    assert ThrottleDecision.from_json(json.loads(text)) == record
    assert len(record.closest_volumes) == 5 and record.closest_volumes[0].eta_seconds is not None


def _filling(horizon_s: float = 1800):
    """A log dir losing 50 MB/s from 300 GB free (hard limit 100 GB): within the horizon from about 3,600 s on."""
    s = settings(hard_bytes=100 * GB, eta=(horizon_s, 600))
    snaps = [ok(t, vol(2, int(300 * GB - 50 * MB * t), total=1000 * GB, log_dir="/data/x"),
                vol(1, 500 * GB, total=1000 * GB)) for t in range(0, 3900, 10)]
    return s, list(decide_all(snaps, s))


def test_the_record_says_which_log_dir_throttles_ahead_its_eta_and_the_horizon():
    s, decided = _filling()
    (first, d0), (last, d) = decided[0], decided[-1]
    record = build_record(last, d, s, SYSTEM.now())
    raw = record.to_json()
    eta = (300 * GB - 50 * MB * 3890 - 100 * GB) / (50 * MB)
    assert raw["predictive"] == {"broker_id": 2, "log_dir": "/data/x", "eta_seconds": pytest.approx(eta),
                                 "horizon_seconds": 1800.0}
    assert raw["throttle_factor"] == pytest.approx(eta / 1800) and raw["throttle_factor"] < 1.0
    assert resources.errors("throttle_decision", json.loads(json.dumps(raw))) == []
    assert ThrottleDecision.from_json(json.loads(json.dumps(raw))) == record
    # Unthrottled: the field is there, null.
    calm = build_record(first, d0, s, SYSTEM.now()).to_json()
    assert calm["predictive"] is None and resources.errors("throttle_decision", calm) == []


def test_records_without_the_predictive_field_or_with_a_bad_one_are_still_read():
    s, decided = _filling()
    raw = build_record(*decided[-1], s, SYSTEM.now()).to_json()
    older = {k: v for k, v in raw.items() if k != "predictive"}
    assert resources.errors("throttle_decision", older) == []
    assert ThrottleDecision.from_json(older).predictive is None
    for bad in ("soon", {"broker_id": 2}, {"broker_id": "2", "log_dir": "/x", "eta_seconds": 1, "horizon_seconds": 2},
                {"broker_id": 2, "log_dir": 7, "eta_seconds": 1, "horizon_seconds": 2}):
        read = ThrottleDecision.from_json({**raw, "predictive": bad})
        assert read.predictive is None and read.throttle_factor == raw["throttle_factor"]
        assert resources.errors("throttle_decision", {**raw, "predictive": bad}) != []
