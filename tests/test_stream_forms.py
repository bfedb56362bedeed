"""The stateful step's two forms on the real query in the test session's Spark: a checkpoint written by the pandas form
(transformWithStateInPandas, the job's form before it decided on rows) is carried on in that form after a restart,
its throttle's start kept; a new checkpoint decides on rows. Spark refuses a restart under the other operator."""
from __future__ import annotations

import time

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.simulator import Simulator
from quota_pipeline.streaming import checkpoint_files, pandas_form
from tests.support.stream_session import job_in_session

GB = 10 ** 9


def _run(spark, conf: cfg.Config, monkeypatch, decisions: int) -> list:
    """The job's rows until `decisions` decisions of the cluster, then stopped."""
    with job_in_session(spark, [conf], monkeypatch) as rows:
        deadline = time.time() + 180
        while len(rows) < decisions and time.time() < deadline:
            time.sleep(0.2)
    assert len(rows) >= decisions, f"{len(rows)} decisions within 180 s"
    return rows


@pytest.fixture
def full(tmp_path):
    sim = Simulator({"cluster_id": "full", "brokers": 1, "log_dirs": 1,
                     "defaults": {"total_bytes": 100 * GB, "available_bytes": 1 * GB}}, port=0).start()
    yield cfg.parse({cfg.HARD_RATIO: "0.1", cfg.CHECK_INTERVAL_ISO: "PT1S", cfg.VALIDITY: "PT30S",
                     cfg.BOOTSTRAP: sim.bootstrap_servers, cfg.ADMIN_PREFIX + "request.timeout.ms": "700",
                     cfg.CLUSTER_NAME: "full", cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint"),
                     cfg.OUTPUT_KAFKA_PREFIX + "bootstrap.servers": "127.0.0.1:1"})
    sim.stop()


def test_a_checkpoint_of_the_pandas_form_goes_on_in_it_and_a_new_one_decides_on_rows(spark, full, monkeypatch):
    import json

    query = checkpoint_files.query_dir(full.checkpoint_path)
    with monkeypatch.context() as m:  # the first run as the job ran before it decided on rows
        m.setattr(checkpoint_files, "stateful_operator", lambda _: pandas_form.OPERATOR)
        before = _run(spark, full, monkeypatch, 2)
    assert checkpoint_files.stateful_operator(query) == pandas_form.OPERATOR
    after = _run(spark, full, monkeypatch, 2)
    since = {json.loads(r.value)["throttled_since"] for r in before + after}
    assert [r.throttle_factor for r in before + after] == [0.0] * len(before + after)
    assert len(since) == 1 and None not in since, since  # one throttle across the restart: the state carried on

    fresh = cfg.parse({**full.raw, cfg.CHECKPOINT_PATH: full.checkpoint_path + "-new"})
    rows = _run(spark, fresh, monkeypatch, 1)
    assert rows[0].throttle_factor == 0.0
    operator = checkpoint_files.stateful_operator(checkpoint_files.query_dir(fresh.checkpoint_path))
    assert operator and operator != pandas_form.OPERATOR
