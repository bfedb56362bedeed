"""The predictive policy (issue 21), reference form: the lower-envelope fill rate over the ETA window and the factor
ETA / horizon. A steady retention sawtooth is never throttled; a real fill is, about one horizon before the wall."""
from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from tests.support.builders import GB, ok, settings, vol
from quota_pipeline.core import config as cfg
from quota_pipeline.core.reference import trend
from quota_pipeline.core.reference.decision import decide_all
from quota_pipeline.core.model import PredictiveThrottle, epoch_micros
from tests.support.builders import at

TOTAL = 1000 * GB
HARD = 100 * GB
STEP = 10  # seconds between polls


def sawtooth(seconds: int, used0: float = 850 * GB, write: float = 20e6, period: int = 300,
             extra: tuple[float, float, float] | None = None) -> list[tuple[int, int]]:
    """(t, available bytes) every STEP s of a disk that takes `write` bytes/s while retention deletes, every
    `period` s, what was written since its last pass (issue 21's study); `extra` = (from, to, bytes/s) written
    on top that retention does not free: a real fill."""
    out, used, last_pass = [], used0, 0
    for t in range(0, seconds, STEP):
        used += write * STEP
        if extra and extra[0] <= t < extra[1]:
            used += extra[2] * STEP
        if t - last_pass >= period:
            used -= write * period
            last_pass = t
        out.append((t, int(TOTAL - used)))
    return out


def decide(readings, horizon_s: float, window_s: float = 3600, soft: int | None = None):
    s = replace(settings(hard_bytes=HARD, soft_bytes=soft), eta_horizon=dt.timedelta(seconds=horizon_s),
                eta_window=dt.timedelta(seconds=window_s))
    snaps = [ok(t, vol(1, a, total=TOTAL), vol(2, 500 * GB, total=TOTAL)) for t, a in readings]
    return list(decide_all(snaps, s))


def test_a_steady_sawtooth_is_never_throttled_though_a_short_fit_would_see_a_crisis():
    readings = sawtooth(6 * 3600)
    decided = decide(readings, horizon_s=3600)
    assert {d.factor for _, d in decided} == {1.0}
    assert all(sm.predictive is None for sm, _ in decided)
    # The record's short fit over 5 readings reads most rising edges as a fill due within the horizon.
    short = [trend.eta_seconds(a - HARD, trend.fill_rate([(t * 10 ** 6, x) for t, x in readings[i - 4:i + 1]]))
             for i, (_, a) in enumerate(readings) if i >= 4]
    assert sum(1 for e in short if e is not None and e < 3600) > 0.5 * len(short)


@pytest.mark.parametrize("horizon_s", [600, 1800])
def test_a_real_fill_starts_to_lower_the_factor_about_one_horizon_before_the_hard_limit(horizon_s):
    # 5 MB/s that retention does not free, from 2 h on, on top of the sawtooth.
    readings = sawtooth(8 * 3600, extra=(7200, 8 * 3600, 5e6))
    limit_at = next(t for t, a in readings if a <= HARD)
    decided = decide(readings, horizon_s=horizon_s)
    factor = {sm.observed_at: d.factor for sm, d in decided}
    first = next(t for t, _ in readings if factor[at(t)] < 1.0)
    assert 0.75 * horizon_s <= limit_at - first <= 1.25 * horizon_s, (limit_at, first)
    # Production is slowed before it would have stopped, more as the limit nears: the last factor before it is
    # a small fraction, and the record can say why (the log dir, its ETA, the horizon).
    before = [factor[at(t)] for t, _ in readings if first <= t < limit_at]
    # (A new bucket's first reading, a tooth's top, can flatten the fit for a few polls at the start.)
    assert before[-1] < 0.1 and all(factor[at(t)] < 1.0 for t, _ in readings
                                    if limit_at - 0.75 * horizon_s <= t < limit_at)
    sm = next(sm for sm, _ in decided if sm.observed_at == at(first))
    assert sm.predictive == PredictiveThrottle(1, "/d0", pytest.approx(factor[at(first)] * horizon_s),
                                               float(horizon_s))


def test_with_the_horizon_off_nothing_changes():
    readings = sawtooth(3 * 3600, extra=(0, 3 * 3600, 20e6))
    off = decide(readings, horizon_s=0)
    plain = list(decide_all([ok(t, vol(1, a, total=TOTAL), vol(2, 500 * GB, total=TOTAL)) for t, a in readings],
                            settings(hard_bytes=HARD)))
    assert off == plain
    assert all(sm.predictive is None for sm, _ in off)


def test_the_least_factor_wins_and_the_predictive_step_is_named_only_when_it_lowers_it():
    # A soft limit lower than the predictive factor: the record says the limits throttle, not the prediction.
    readings = [(t, int(300 * GB - 50e6 * t)) for t in range(0, 3000, STEP)]
    decided = decide(readings, horizon_s=3600, window_s=600, soft=400 * GB)
    late = decided[-1][0]
    volume = (readings[-1][1] - HARD) / (400 * GB - HARD)
    assert decided[-1][1].factor == pytest.approx(volume) and late.predictive is None
    eta = (readings[-1][1] - HARD) / 50e6
    assert eta / 3600 > volume


def test_buckets_are_aligned_to_the_epoch_so_two_jobs_started_apart_agree():
    bucket = trend.bucket_micros(dt.timedelta(minutes=60))
    assert bucket == 600 * 10 ** 6
    readings = [(epoch_micros(at(t)), a) for t, a in sawtooth(3 * 3600)]
    def run(rs):
        b = ()
        for t, a in rs:
            b = trend.add_reading(b, t, a, bucket)
        return b
    early, late = run(readings), run(readings[len(readings) // 3:])
    assert early == late and len(early) == trend.ETA_BUCKETS
    assert all(t // bucket == late[-1][0] // bucket - 5 + i for i, (t, _, _) in enumerate(late))
    # Each keeps its bucket's least reading (the earlier of equal ones) and its most available bytes.
    first_bucket = [x for x in readings if x[0] // bucket == late[0][0] // bucket]
    assert late[0] == (*min(first_bucket, key=lambda x: (x[1], x[0])), max(a for _, a in first_bucket))


def test_fewer_than_three_buckets_give_no_rate():
    bucket = 60 * 10 ** 6
    b = trend.add_reading((), 0, 100, bucket)
    b = trend.add_reading(b, 30 * 10 ** 6, 90, bucket)   # the same bucket: its minimum falls
    assert b == ((30 * 10 ** 6, 90, 100),)
    b = trend.add_reading(b, 70 * 10 ** 6, 10, bucket)   # a steep fall, but only two buckets
    assert len(b) == 2 and trend.envelope_rate(b) is None
    b = trend.add_reading(b, 130 * 10 ** 6, 5, bucket)
    assert trend.envelope_rate(b) == pytest.approx(15 / 19)   # LSQ over the minima at 30, 70, 130 s
    # A reading six buckets later leaves only itself.
    assert trend.add_reading(b, 130 * 10 ** 6 + 6 * bucket, 5, bucket) == ((490 * 10 ** 6, 5, 5),)


def test_a_dir_with_two_buckets_of_a_fast_fill_is_not_throttled_yet():
    # 50 MB/s, 810 s from the limit at the end: within the horizon, but 10 min buckets have seen two of them.
    readings = [(t, int(200 * GB - 50e6 * t)) for t in range(0, 1200, STEP)]
    decided = decide(readings, horizon_s=3600)
    assert {d.factor for _, d in decided} == {1.0}
    more = decide(readings + [(1200, int(200 * GB - 50e6 * 1200))], horizon_s=3600)   # a third bucket
    assert more[-1][1].factor == pytest.approx((140 * GB - HARD) / 50e6 / 3600)


def test_a_clean_up_releases_the_predictive_throttle_at_the_next_reading():
    # 100 MB/s from 400 GB available: the hard limit (100 GB) at 3000 s. At 2410 s, 40 % of the disk is freed at
    # once (an operator deletes a topic) while the producer goes on.
    fill = [(t, int(400 * GB - 100e6 * t)) for t in range(0, 2410, STEP)]
    freed = [(t, int(400 * GB - 100e6 * t + 400 * GB)) for t in range(2410, 9000, STEP)]
    decided = decide(fill + freed, horizon_s=3600)
    factor = {sm.observed_at: d.factor for sm, d in decided}
    assert factor[at(2400)] < 0.2 and decided[len(fill) - 1][0].predictive is not None
    # The lowest reading of the window (60 GB above the limit) no longer holds the factor: 1.0 at once.
    assert factor[at(2410)] == 1.0 and decided[len(fill)][0].predictive is None
    # The history restarted there: the fill that goes on is flagged again about one horizon before the limit.
    limit_at = next(t for t, a in freed if a <= HARD)
    first = next(t for t, _ in freed if factor[at(t)] < 1.0)
    assert 0.75 * 3600 <= limit_at - first <= 1.25 * 3600, (limit_at, first)


def test_a_sawtooth_during_a_real_fill_never_passes_for_a_clean_up():
    # Retention's passes lift a filling disk less each time: no top of the fill exceeds the window's, so the
    # history is never restarted and the fill is flagged as early as without clean-ups (the test above).
    bucket = trend.bucket_micros(dt.timedelta(hours=1))
    readings = sawtooth(8 * 3600, extra=(7200, 8 * 3600, 5e6))
    b, restarts = (), []
    for t, a in readings:
        kept = trend.in_window(b, t * 10 ** 6, bucket)
        if trend.cleaned_up(kept, a):
            restarts.append(t)
        b = trend.add_reading(b, t * 10 ** 6, a, bucket)
    assert restarts == []
    # A steady sawtooth with a quiet hour (half the writes: passes free more than was written since) restarts,
    # and is still never throttled.
    quiet = [(t, a + (int(10e6 * (t - 3600)) if 3600 <= t < 7200 else int(10e6 * 3600) if t >= 7200 else 0))
             for t, a in sawtooth(4 * 3600)]
    assert any(trend.cleaned_up(trend.in_window(run_buckets(quiet[:i], bucket), t * 10 ** 6, bucket), a)
               for i, (t, a) in enumerate(quiet))
    assert {d.factor for _, d in decide(quiet, horizon_s=3600)} == {1.0}


def run_buckets(readings, bucket: int) -> tuple:
    b = ()
    for t, a in readings:
        b = trend.add_reading(b, t * 10 ** 6, a, bucket)
    return b


def test_a_fenced_brokers_pinned_reading_keeps_its_predictive_factor():
    s = replace(settings(hard_bytes=HARD, validity_s=60), eta_horizon=dt.timedelta(seconds=3600),
                eta_window=dt.timedelta(seconds=60))
    snaps = [ok(t, vol(1, int(200 * GB - 100e6 * t), total=TOTAL), vol(2, 500 * GB, total=TOTAL))
             for t in range(0, 400, STEP)]
    snaps += [ok(400 + 10 * i, vol(2, 500 * GB, total=TOTAL), brokers=(2,), fenced=(1,)) for i in range(1, 20)]
    decided = list(decide_all(snaps, s))
    held = [d.factor for _, d in decided[len(snaps) - 19:]]
    assert held == [decided[39][1].factor] * 19 and held[0] < 1.0
    assert decided[-1][0].predictive.broker_id == 1


def props(**extra) -> dict:
    return {cfg.HARD_BYTES: "1000", cfg.BOOTSTRAP: "127.0.0.1:1", **extra}


def test_the_window_must_leave_each_bucket_a_check_interval():
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse(props(**{cfg.ETA_HORIZON: "PT30M", cfg.CHECK_INTERVAL_ISO: "PT15M"}))
    assert [str(p) for p in err.value.problems] == [
        f"error: {cfg.ETA_WINDOW}: a sixth of the window must be at least the check interval (PT15M); set it to at "
        "least PT1H30M (got PT1H)"]
    # Off (the default horizon), the window is not looked at: a long check interval stays valid.
    assert cfg.parse(props(**{cfg.CHECK_INTERVAL_ISO: "PT15M"})).eta_horizon == dt.timedelta(0)
    conf = cfg.parse(props(**{cfg.ETA_HORIZON: "PT30M", cfg.ETA_WINDOW: "PT2H", cfg.CHECK_INTERVAL_ISO: "PT15M"}))
    assert (conf.eta_horizon, conf.eta_window) == (dt.timedelta(minutes=30), dt.timedelta(hours=2))
    with pytest.raises(cfg.ConfigError, match="eta.window: must be longer than PT0S"):
        cfg.parse(props(**{cfg.ETA_WINDOW: "PT0S"}))
