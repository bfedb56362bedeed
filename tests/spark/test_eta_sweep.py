"""`replay --sweep storage.per.volume.eta.horizon=...` (issue 21, point 4): the key is accepted, and the columns it
adds (time stopped, least headroom, production deferred) hold the values worked out by hand on a small journal;
the month-long generated journal (harness/month_model.py) hits the hard limit in both incidents and is not throttled on
its steady days at PT1H."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import Status, Volume, VolumeSnapshot
from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.settings import Settings
from harness import month_model
from quota_pipeline.journal import period_file
from quota_pipeline.replay import job
from quota_pipeline.replay import sweep as sweeps
from quota_pipeline.replay.cluster_files import ClusterFiles, Task

import pyarrow.parquet as pq

P = "client.quota.callback.static."
GIB, MIB = 1024 ** 3, 1024 ** 2
START = dt.datetime(2026, 11, 21, 8, tzinfo=dt.timezone.utc)  # a multiple of the 10-minute buckets
HARD = 5 * GIB
HORIZON_S = 1770  # PT29M30S: no reading falls on the horizon's edge


def falling(n: int = 131) -> list[VolumeSnapshot]:
    """One log dir of 100 GiB read every minute, losing 60 MiB a minute: at the hard limit (5 GiB available) at
    reading 120, 600 MiB past it at reading 130, the last."""
    return [VolumeSnapshot("c", START + dt.timedelta(minutes=i), Status.SUCCESS, (1,), (),
                           (Volume(1, "/d", 100 * GIB, HARD + (120 - i) * 60 * MIB),)) for i in range(n)]


def month_settings(horizon_s: float = 0) -> Settings:
    """bench/eta_sweep.py's: the hard limit at 5 % available alone, validity PT5M, the predictive horizon given."""
    return Settings(Limits(Limit("ratio", 0.05)), dt.timedelta(minutes=5), 1.0,
                    eta_horizon=dt.timedelta(seconds=horizon_s))


def write_conf(path: Path) -> Path:
    path.write_text(f"{P}storage.per.volume.limit.min.available.bytes={HARD}\n"
                    f"{P}throttle.factor.validity.duration=PT5M\n{P}storage.check.interval=PT60S\n")
    return path


# Worked out by hand. Each decision holds until the next reading (60 s), the last for none.
# PT0S: factor 0 at readings 120..129 (at or past the limit): 600 s stopped and throttled; the disk grew 60 MiB
# after each, all of it deferred. PT29M30S: the envelope's rate is the exact 1 MiB/s, so the ETA at reading i is
# (120 - i) x 60 s and the factor ETA / 1770 s falls below 1 from reading 91: 39 decisions throttled, the last 10 of
# them at 0; deferred sum over j = 1..29 of (1 - 60 j / 1770) plus 10, times 60 MiB.
EXPECTED = {
    "PT0S": {"throttled_s": 600.0, "stopped_s": 600.0, "episodes": 1, "deferred_bytes": 10 * 60 * MIB},
    "PT29M30S": {"throttled_s": 39 * 60.0, "stopped_s": 600.0, "episodes": 1,
                 "deferred_bytes": (sum(1 - 60 * j / HORIZON_S for j in range(1, 30)) + 10) * 60 * MIB},
}


def test_the_horizon_and_window_can_be_swept_by_short_or_full_name(tmp_path):
    base = cfg.load(write_conf(tmp_path / "c.properties"), require_admin=False)
    short = sweeps.parse("storage.per.volume.eta.horizon=PT0S,PT10M,PT30M,PT1H", base)
    full = sweeps.parse(P + "storage.per.volume.eta.horizon=PT0S,PT10M,PT30M,PT1H", base)
    assert short.key == full.key == P + "storage.per.volume.eta.horizon"
    assert [s.eta_horizon for s in short.settings] == [dt.timedelta(minutes=m) for m in (0, 10, 30, 60)]
    window = sweeps.parse("storage.per.volume.eta.window=PT30M,PT2H", base)
    assert [s.eta_window for s in window.settings] == [dt.timedelta(minutes=30), dt.timedelta(hours=2)]


def test_a_window_too_short_for_the_check_interval_is_one_error_line(tmp_path, capsys):
    conf = write_conf(tmp_path / "c.properties")
    conf.write_text(conf.read_text() + f"{P}storage.per.volume.eta.horizon=PT30M\n")
    (tmp_path / "j.jsonl").write_text("{}\n")
    code = main(["replay", "--config", str(conf), "--input", str(tmp_path / "j.jsonl"),
                 "--output", str(tmp_path / "o.jsonl"), "--sweep", "storage.per.volume.eta.window=PT1H,PT3M"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --sweep: ") and "PT3M" in err, err


@pytest.mark.parametrize("chunk_rows", [10 ** 9, 17])
def test_the_columns_hold_the_values_worked_out_by_hand(tmp_path, chunk_rows):
    """Without Spark, in one chunk and in chunks of 17 readings (the last used bytes carried between them)."""
    path = tmp_path / "j.parquet"
    pq.write_table(period_file.table_of(period_file.Entry("j", i, s.to_json()) for i, s in enumerate(falling())),
                   str(path))
    base = cfg.load(write_conf(tmp_path / "c.properties"), require_admin=False)
    sweep = sweeps.parse("storage.per.volume.eta.horizon=PT0S,PT29M30S", base)
    p = ClusterFiles(Task("c", (str(path),)), Settings.of(base), sweep.settings, chunk_rows=chunk_rows)
    for _ in p.batches():
        pass
    o = p.outcome
    assert np.array_equal(o.written(), np.array([0.0] + [60.0 * MIB] * 130))
    t, *_ = o.series(0)
    for i, value in enumerate(sweep.values, start=1):
        _, _, factor, fallback, _, ratio, headroom = o.series(i)
        m = sweeps.episode_metrics(t, factor, fallback, ratio, headroom, o.written())
        assert m["least_headroom_bytes"] == -600 * MIB
        for k, v in EXPECTED[value].items():
            assert m[k] == pytest.approx(v, rel=1e-9), (value, k)


def test_replay_writes_the_columns_to_the_sweep_file(spark, tmp_path):
    journal = tmp_path / "j.jsonl"
    journal.write_text("".join(json.dumps(s.to_json()) + "\n" for s in falling()))
    base = cfg.load(write_conf(tmp_path / "c.properties"), require_admin=False)
    sweep = sweeps.parse("storage.per.volume.eta.horizon=PT0S,PT29M30S", base)
    result = job.run(spark, Settings.of(base), str(journal), str(tmp_path / "out.jsonl"), sweep=sweep)
    written = {r["value"]: r for r in json.loads(Path(result.sweep_path).read_text())}
    for value, expected in EXPECTED.items():
        assert written[value]["least_headroom_bytes"] == -600 * MIB
        for k, v in expected.items():
            assert written[value][k] == pytest.approx(v, rel=1e-9), (value, k)


# ---- the month -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded():
    """The month as the cluster recorded it under the hard limit alone (the journal bench/eta_sweep.py writes)."""
    return month_model.closed_loop(month_settings(), keep=True)


def _days(t_s: np.ndarray) -> np.ndarray:
    return (t_s // 86_400).astype(int)


def incident_days() -> set[int]:
    return {int((a + x) // 86_400) for a, length, _ in (month_model.INCIDENT_1, month_model.INCIDENT_2) for x in (0, length)}


def test_both_incidents_of_the_month_reach_the_hard_limit(recorded):
    stopped = recorded.factor == 0.0
    for a, length, _ in (month_model.INCIDENT_1, month_model.INCIDENT_2):
        during = (recorded.t_s >= a) & (recorded.t_s < a + length)
        assert (recorded.headroom[during] <= 0).any()
        assert stopped[during].sum() >= 60, "at least an hour stopped at the hard limit in each incident"
    assert not stopped[~np.isin(_days(recorded.t_s), list(incident_days()))].any()
    assert len(recorded.snapshots) == 30 * 1440 and len(recorded.snapshots[0].volumes) == 12


def test_the_months_steady_days_are_not_throttled_at_a_horizon_of_an_hour(recorded, tmp_path):
    """The recorded journal replayed (the compiled pass) at PT1H: throttled only on the incidents' days."""
    path = tmp_path / "month.parquet"
    pq.write_table(period_file.table_of(period_file.Entry("m", i, s.to_json())
                                        for i, s in enumerate(recorded.snapshots)), str(path))
    p = ClusterFiles(Task(month_model.CLUSTER, (str(path),)), month_settings(3600))
    factor = np.concatenate([b.column("throttle_factor").to_numpy() for b in p.batches()])
    days = _days(recorded.t_s)
    throttled_days = set(days[factor < 1].tolist())
    assert throttled_days and throttled_days <= incident_days()
    # The horizon throttles each incident before the hard limit did.
    for a, length, _ in (month_model.INCIDENT_1, month_model.INCIDENT_2):
        during = (recorded.t_s >= a) & (recorded.t_s < a + length)
        first_stop = np.flatnonzero(during & (recorded.factor == 0))[0]
        first_throttle = np.flatnonzero(during & (factor < 1))[0]
        assert recorded.t_s[first_stop] - recorded.t_s[first_throttle] >= 30 * 60
