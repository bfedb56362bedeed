"""`run` restarts a failing query with backoff, and gives up (exit code 4) once no micro-batch has published for
quota.pipeline.run.give.up.after, so that a supervisor sees a job that cannot work. No Spark here: the query is a
fake that fails, the clock a manual one."""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from quota_pipeline.cli import build_parser, main
from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import ManualClock
from quota_pipeline.streaming import query
from quota_pipeline.streaming.query import StreamJob, output_ready
from quota_pipeline.streaming.restarts import GAVE_UP, GaveUp, Restarts

ROOT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, *extra: str) -> Path:
    path = tmp_path / "c.properties"
    path.write_text("\n".join([
        "client.quota.callback.static.kafka.admin.bootstrap.servers=127.0.0.1:1",
        "client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05",
        "client.quota.callback.static.storage.check.interval=PT10S",
        f"quota.pipeline.checkpoint.path={tmp_path / 'checkpoints'}",
        "quota.pipeline.cluster.name=east", *extra]) + "\n")
    return path


def test_the_default_gives_up_after_fifteen_minutes_and_pt0s_never(tmp_path):
    assert cfg.load(write_config(tmp_path)).run_give_up_after == dt.timedelta(minutes=15)
    assert cfg.load(write_config(tmp_path, "quota.pipeline.run.give.up.after=PT0S")).run_give_up_after == dt.timedelta(0)
    with pytest.raises(cfg.ConfigError) as bad:
        cfg.load(write_config(tmp_path, "quota.pipeline.run.give.up.after=ten minutes"))
    assert "quota.pipeline.run.give.up.after: must be an ISO-8601 duration" in str(bad.value.problems[0])


def test_backoff_doubles_to_a_minute_and_a_published_batch_starts_over():
    clock = ManualClock()
    restarts = Restarts(dt.timedelta(hours=1), clock)
    waits = []
    for _ in range(7):
        waits.append(restarts.failed())
        clock.advance(waits[-1])
    assert waits == [2, 4, 8, 16, 32, 60, 60]
    restarts.published()
    assert (restarts.failed(), restarts.failures) == (2, 1)


def test_it_gives_up_at_the_first_failure_past_the_limit_counted_from_the_last_publication():
    clock = ManualClock()
    restarts = Restarts(dt.timedelta(minutes=15), clock)
    clock.advance(14 * 60)
    restarts.published()  # a batch published at 14 min: the streak counts from here
    clock.advance(14 * 60)
    assert restarts.failed() == 2
    clock.advance(61)
    assert restarts.failed() is None  # 15 min 1 s without a publication
    line = restarts.giving_up("boom")
    assert line.startswith("giving up: no micro-batch published for 901 s across 2 failed run(s) of the query "
                           "(quota.pipeline.run.give.up.after=PT15M); last failure: boom; exiting with code 4")
    assert "\n" not in line


def test_pt0s_restarts_forever():
    clock = ManualClock()
    restarts = Restarts(dt.timedelta(0), clock)
    for _ in range(2000):  # more than a day of failures, each followed by a restart
        clock.advance(restarts.failed())
    assert clock.monotonic() > 24 * 3600


class _Event:
    """The job's stop event, whose waits pass on the manual clock at once."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.waits = clock, []

    def is_set(self) -> bool:
        return False

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.clock.advance(seconds)
        return False


def failing_job(tmp_path: Path, give_up: str, each_run: float = 5.0) -> tuple[StreamJob, _Event, list[str]]:
    clock = ManualClock()
    conf = cfg.load(write_config(tmp_path, f"quota.pipeline.run.give.up.after={give_up}"))
    job = StreamJob([conf], clock=clock)
    stop = _Event(clock)
    prepared: list[str] = []
    job._stop = stop

    def run_query() -> str:
        clock.advance(each_run)  # a query that starts, then fails its micro-batch
        return "org.apache.kafka.common.errors.TimeoutException: Topic not present in metadata"

    job._run_query = run_query
    job.prepare_output = lambda: prepared.append("ensured") or "exists"
    return job, stop, prepared


def test_the_job_gives_up_with_code_4_and_one_line(tmp_path, caplog):
    job, stop, prepared = failing_job(tmp_path, "PT2M")
    with caplog.at_level(logging.WARNING, logger="quota_pipeline"):
        assert job._run(max_restarts=None) == GAVE_UP == 4
    # 5 s per run and 2, 4, 8, 16, 32, 60 s of backoff: 92 s at the sixth failure, 157 s at the seventh.
    assert stop.waits == [2, 4, 8, 16, 32, 60]
    assert len(prepared) == 6  # the topic ensured before each restart
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith("giving up: no micro-batch published for 157 s across 7 failed run(s) of the "
                                "query (quota.pipeline.run.give.up.after=PT2M); last failure: "
                                "org.apache.kafka.common.errors.TimeoutException")


def test_a_job_that_publishes_between_failures_keeps_restarting(tmp_path):
    job, stop, _ = failing_job(tmp_path, "PT1M")
    runs = []

    def publishes_then_fails() -> str | None:
        runs.append(1)
        if len(runs) == 40:
            return None  # stopped by a signal
        job.clock.advance(50)
        job._restarts.published()  # what _batch does after each published micro-batch
        job.clock.advance(20)
        return "a delivery failure"

    job._run_query = publishes_then_fails
    assert job._run(max_restarts=None) == 0
    assert set(stop.waits) == {2}  # every failure follows a publication: the first backoff each time


def test_run_exits_4_when_it_gives_up(tmp_path, monkeypatch, capsys):
    """The command's exit code, as a supervisor sees it (the query is a fake that fails; no Spark starts)."""
    path = write_config(tmp_path, "quota.pipeline.run.give.up.after=PT0.2S")

    class NoMaintenance:
        def __init__(self, *args, **kwargs) -> None: ...
        def start(self) -> None: ...
        def stop(self) -> None: ...

    def run_query(self) -> str:
        import time

        time.sleep(0.3)
        return "the query stopped"

    monkeypatch.setattr(query, "Maintenance", NoMaintenance)
    monkeypatch.setattr(StreamJob, "_run_query", run_query)
    monkeypatch.setattr(StreamJob, "prepare_output", lambda self: "exists")
    monkeypatch.setattr("quota_pipeline.session.require_java", lambda: None)
    monkeypatch.setattr("quota_pipeline.kafka.publisher.stall_warning", lambda configs: (None, None))
    monkeypatch.setattr("signal.signal", lambda signum, handler: None)  # pytest keeps its own Ctrl-C
    assert main(["run", str(path), "--no-metrics"]) == 4


def _unreachable() -> str:
    raise RuntimeError("KafkaError{code=_TRANSPORT,val=-195}: Failed to get metadata: Local: Broker transport failure")


def test_a_resuming_job_waits_out_an_output_outage_up_to_the_give_up_point():
    clock = ManualClock()
    stop = _Event(clock)
    with pytest.raises(GaveUp) as gave_up:
        output_ready(_unreachable, resuming=True, stop=stop, warn=lambda m: None,
                     give_up_after=dt.timedelta(minutes=1), clock=clock)
    assert stop.waits == [2, 4, 8, 10, 10, 10, 10, 10]  # 64 s: past the minute at the ninth try
    assert str(gave_up.value) == (
        "giving up: the output cluster has not answered for 64 s (quota.pipeline.run.give.up.after=PT1M): "
        "KafkaError{code=_TRANSPORT,val=-195}: Failed to get metadata: Local: Broker transport failure; exiting "
        "with code 4 so that the supervisor restarts the job or alerts")
    stop = _Event(clock)
    with pytest.raises(RuntimeError):  # never waited for at a first start: most likely a wrong address
        output_ready(_unreachable, resuming=False, stop=stop, warn=lambda m: None,
                     give_up_after=dt.timedelta(minutes=1), clock=clock)
    assert stop.waits == []


def test_run_exits_4_when_the_output_cluster_stays_unreachable_on_resume(tmp_path, monkeypatch, capsys):
    path = write_config(tmp_path, "quota.pipeline.run.give.up.after=PT1S")
    monkeypatch.setattr(StreamJob, "resuming", lambda self: True)
    monkeypatch.setattr(StreamJob, "prepare_output", lambda self: _unreachable())
    monkeypatch.setattr("quota_pipeline.session.require_java", lambda: None)
    monkeypatch.setattr("signal.signal", lambda signum, handler: None)
    assert main(["run", str(path), "--no-metrics"]) == 4  # after one wait of 2 s
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("giving up: the output cluster has not answered for 2 s")
    assert not any("Traceback" in line for line in err)


def test_the_help_and_the_docs_name_the_give_up_point_and_exit_code(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "quota.pipeline.run.give.up.after" in help_text and f"{GAVE_UP} gave up" in help_text
    operations = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    assert "quota.pipeline.run.give.up.after" in operations and f"exit code {GAVE_UP}" in operations
    assert "`quota.pipeline.run.give.up.after` | PT15M |" in (ROOT / "docs" / "configuration.md").read_text()
