"""What an operator sees of `quota-pipeline run` in a terminal: its own lines from the start (Spark's and librdkafka's
in the log file), Ctrl-C stopping it as SIGTERM does (one line, exit 0), also when its output goes through `| tee`,
and a restart saying at which factor it resumed. The job runs as a process against the simulator and Tansu."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.demo.local_broker import BrokerUnavailable, LocalBroker
from quota_pipeline.simulator import Simulator

TOTAL = 10 ** 12
START_TIMEOUT_S = 150  # Spark's start on 2 busy cores; the job's own lines come long before
OWN_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING|ERROR) ")
DECIDED = "c1: throttle factor"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster whose every log dir is past the limit (a stop in force), Tansu as the output cluster, a config."""
    work = tmp_path_factory.mktemp("run-terminal")
    try:
        broker = LocalBroker(log_path=work / "tansu.log").start()
    except BrokerUnavailable as exc:
        pytest.skip(str(exc))
    sim = Simulator({"cluster_id": "c1", "brokers": 3, "log_dirs": 1,
                     "defaults": {"total_bytes": TOTAL, "used_ratio": 0.95}}, port=0).start()
    conf = work / "c1.properties"
    conf.write_text("\n".join([
        f"{cfg.HARD_RATIO}=0.1",
        f"{cfg.CHECK_INTERVAL_ISO}=PT1S",
        f"{cfg.BOOTSTRAP}={sim.bootstrap_servers}",
        f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
        f"{cfg.CHECKPOINT_PATH}={work / 'checkpoint'}",
        f"{cfg.CLUSTER_NAME}=c1",
    ]) + "\n")
    yield conf
    sim.stop()
    broker.stop()


def _job(conf: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "run", str(conf), "--no-metrics",
                             "--master", "local[2]"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=conf.parent, **popen)


def _wait_for(read, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in read() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert text in read(), read()[-3000:]


def _end(*processes: subprocess.Popen) -> None:
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait(10)


@pytest.fixture(scope="module")
def under_tee(cluster):
    """`quota-pipeline run c1.properties 2>&1 | tee out` in one process group, then Ctrl-C to that group, as a
    terminal sends it: tee ends at once, the job finds no reader of its output any more."""
    out = cluster.parent / "tee.out"
    job = _job(cluster, process_group=0)
    tee = subprocess.Popen(["tee", str(out)], stdin=job.stdout, stdout=subprocess.DEVNULL, process_group=job.pid)
    job.stdout.close()
    try:
        _wait_for(lambda: out.read_text(errors="replace") if out.exists() else "", DECIDED, job)
        first_screen = out.read_text(errors="replace")
        os.killpg(job.pid, signal.SIGINT)
        code = job.wait(90)
        tee.wait(10)
    finally:
        _end(job, tee)
    return {"code": code, "first_screen": first_screen, "out": out.read_text(errors="replace"),
            "log": (cluster.parent / "checkpoint" / "run.log").read_text(errors="replace")}


@pytest.fixture(scope="module")
def restarted(cluster, under_tee):
    """The same job started again on its checkpoint, its output a pipe; Ctrl-C to the job alone once it decided.
    Before it starts, someone plants tick files in its journal for the ticks to come (their token removed)."""
    plant_foreign_ticks(cluster)
    job = _job(cluster, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(job.stdout.readline, b"")), daemon=True)
    reader.start()
    text = lambda: b"".join(lines).decode(errors="replace")  # noqa: E731
    try:
        _wait_for(text, DECIDED, job)
        first_screen = text()
        deadline = time.monotonic() + 30  # a worker's line reaches the terminal through the log file
        while FOREIGN not in text() and time.monotonic() < deadline:
            time.sleep(0.2)
        job.send_signal(signal.SIGINT)
        code = job.wait(90)
        reader.join(10)
    finally:
        _end(job)
    return {"code": code, "first_screen": first_screen, "out": text()}


def plant_foreign_ticks(conf_path: Path, count: int = 300) -> None:
    import datetime as dt
    import json

    from quota_pipeline.journal import layout, ownership
    from quota_pipeline.streaming import source

    conf = cfg.load(conf_path)
    journal = conf_path.parent / "checkpoint" / "journal" / "c1"
    own = json.loads(next(journal.rglob("*.json")).read_text())
    own.pop(ownership.TOKEN_FIELD, None)
    now = source.current_tick(conf, dt.datetime.now(dt.timezone.utc))
    for tick in range(now + 1, now + count):
        path = journal / layout.tick_file(tick, source.tick_time(conf, tick))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(own) + "\n")


FOREIGN = "that this job did not write"


def test_ctrl_c_under_tee_exits_0_without_a_traceback(under_tee):
    assert under_tee["code"] == 0, under_tee["out"][-3000:]
    assert "Traceback" not in under_tee["out"] and "interrupted" not in under_tee["out"]


def test_ctrl_c_with_output_to_a_pipe_stops_after_the_micro_batch_in_one_line_exit_0(restarted):
    out = restarted["out"]
    assert restarted["code"] == 0, out[-3000:]
    assert "Traceback" not in out and "interrupted" not in out
    lines = out.splitlines()
    after = lines[next(i for i, line in enumerate(lines) if "received SIGINT" in line):]
    assert after[0].endswith("received SIGINT: stopping after the running micro-batch"), after
    assert all(OWN_LINE.match(line) for line in after), after


def test_the_first_screen_shows_only_the_jobs_own_lines(under_tee):
    lines = [line for line in under_tee["first_screen"].splitlines() if line.strip()]
    assert lines and DECIDED in lines[-1]
    strangers = [line for line in lines if not OWN_LINE.match(line)]
    assert not strangers, strangers
    screen = under_tee["first_screen"]
    assert " WARN " not in screen and "%4|" not in screen and "StructType" not in screen
    assert any("own lines go to" in line and "run.log" in line for line in lines)
    # Not lost: Spark's lines and its Python workers' output are in the log file.
    assert "Python worker" in under_tee["log"], under_tee["log"][-2000:]


def test_a_restart_says_at_which_factor_it_resumed(restarted):
    screen = restarted["first_screen"]
    assert "resumed from the checkpoint: c1 at factor 0.000 (stop in force)" in screen, screen
    assert "none ->" not in screen
    decided = [line for line in screen.splitlines() if DECIDED in line]
    assert decided and "0.000 kept" in decided[0], decided
    assert all(OWN_LINE.match(line) for line in screen.splitlines() if line.strip()), screen


def test_the_demo_shows_times_as_run_logs_them():
    """One form for every time an operator reads: the demo's table as run's lines and the records (RFC 3339, UTC)."""
    import datetime as dt
    import json
    from types import SimpleNamespace

    from rich.console import Console

    from quota_pipeline.demo.runner import LiveView

    view = LiveView()
    view.add([SimpleNamespace(observed_at=dt.datetime(2026, 12, 2, 3, 35, 20, 899000, tzinfo=dt.timezone.utc),
                              throttle_factor=0.0, decision_source="OBSERVATION", status="SUCCESS", violations=3,
                              active_log_dirs=3, value=json.dumps({"worst_volume": None}))])
    console = Console(width=200, record=True)
    console.print(view.render())
    assert "2026-12-02T03:35:20.899Z" in console.export_text()


def test_a_resume_line_from_a_file_this_job_did_not_write_claims_no_factor(tmp_path):
    from quota_pipeline.streaming import held

    held.write(str(tmp_path), {"c1": (0.0, "OBSERVATION"), "c2": (0.5, "FALLBACK")})
    assert held.resumed_line(held.read(str(tmp_path))) == (
        "resumed from the checkpoint: c1 at factor 0.000 (stop in force), c2 at factor 0.500 (throttled)")
    for planted in ('{"c1": [7, "OBSERVATION"]}', '{"c1": "0.0"}', "[]", "not json", '{"c1": [NaN, "x"]}'):
        (tmp_path / held.NAME).write_text(planted)
        assert held.resumed_line(held.read(str(tmp_path))) == (
            "resumed from the checkpoint (it does not record the factors in force)")


def test_librdkafka_speaks_through_its_logger_not_straight_to_stderr(capfd, caplog):
    """So that `run` can send its lines to the log file (or, with -v, to the terminal) like Spark's."""
    from quota_pipeline.kafka.publisher import LIBRDKAFKA_LOG, Publisher

    caplog.set_level("INFO", logger=LIBRDKAFKA_LOG.name)
    publisher = Publisher({"bootstrap.servers": "127.0.0.1:9"}, "t", flush_timeout=2)
    with pytest.raises(Exception):
        publisher.publish([("k", "v")])
    publisher.abandon()
    assert "%3|" not in capfd.readouterr().err
    assert any("Connection refused" in r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOG.name)


def test_a_warning_of_a_polling_worker_reaches_the_terminal_as_the_jobs_own_line(restarted):
    """Spark's Python workers write to the log file; the job's own warnings among them (here: tick files in the
    journal that it did not write) still reach the terminal, in the job's form."""
    found = [line for line in restarted["out"].splitlines() if FOREIGN in line]
    assert found and all(OWN_LINE.match(line) and " WARNING c1: tick " in line for line in found), found


def test_the_log_file_of_a_job_without_a_local_checkpoint_lives_where_only_its_user_can_write(tmp_path, monkeypatch,
                                                                                             capsys):
    import argparse
    import tempfile

    from quota_pipeline.commands.run import log_file

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    args = argparse.Namespace(verbose=False, log_file=None)
    path = log_file(args, "s3a://bucket/checkpoints")
    assert path == tmp_path / f"quota-pipeline-{os.getuid()}" / "run.log" and path.exists()
    assert path.parent.stat().st_mode & 0o077 == 0
    path.unlink()
    path.parent.rmdir()
    (tmp_path / "elsewhere").mkdir()
    path.parent.symlink_to(tmp_path / "elsewhere")  # planted by another user of the host
    with pytest.raises(SystemExit) as refused:
        log_file(args, "s3a://bucket/checkpoints")
    assert refused.value.code == 2 and "pass --log-file FILE or -v" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere" / "run.log").exists()
    assert log_file(argparse.Namespace(verbose=True, log_file=None), "s3a://bucket/checkpoints") is None
