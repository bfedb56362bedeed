"""What an operator sees of `quota-pipeline run` in a terminal: its own lines from the start (Spark's and librdkafka's
in the log file), Ctrl-C stopping it as SIGTERM does (one line, exit 0), also when its output goes through `| tee`,
and a restart saying at which factor it resumed. The job runs as a process against the simulator and Tansu, from a
fresh install's empty cache: the first start writes the JVM class archive in the background, the restart maps it,
and each start measures itself and warns of a validity that does not cover twice the last one."""
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


def _cache(conf: Path) -> Path:
    return conf.parent / "cache"  # XDG_CACHE_HOME: the class archive of this module's jobs only


def _archive(conf: Path) -> Path:
    from quota_pipeline.session import archive_path

    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(_cache(conf))
    try:
        path = archive_path()
    finally:
        os.environ.pop("XDG_CACHE_HOME") if before is None else os.environ.update(XDG_CACHE_HOME=before)
    assert path is not None
    return path


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "XDG_CACHE_HOME": str(cache)}


def _job(conf: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "run", str(conf), "--no-metrics",
                             "--master", "local[2]"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=_env(_cache(conf)), cwd=conf.parent, **popen)


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
    from quota_pipeline.streaming import start_time

    return {"code": code, "first_screen": first_screen, "out": out.read_text(errors="replace"),
            "log": (cluster.parent / "checkpoint" / "run.log").read_text(errors="replace"),
            "kept": start_time.read(str(cluster.parent / "checkpoint"))}


ARCHIVE_TIMEOUT_S = 420  # the first start's background prepare, at nice 5 on 2 busy cores


def archive_written(conf: Path) -> list[int]:
    """Wait for the class archive the first start writes in the background; the sizes the archive's own path held
    meanwhile, sampled every 20 ms (a JVM starting then would have mapped what it held)."""
    from quota_pipeline.session import archive_in_use

    path, sizes = _archive(conf), []
    deadline = time.monotonic() + ARCHIVE_TIMEOUT_S
    while not archive_in_use(path) and time.monotonic() < deadline:
        try:
            sizes.append(path.stat().st_size)
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    log = (conf.parent / "checkpoint" / "run.log").read_text(errors="replace")
    assert archive_in_use(path), f"no class archive {path} in {ARCHIVE_TIMEOUT_S} s: {log[-3000:]}"
    return sizes


def mapped_by_jvm(job: subprocess.Popen, path: Path) -> bool:
    """Whether a JVM the job started maps `path` (its memory map names the file)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == job.pid \
                    and str(path) in (proc / "maps").read_text():
                return True
        except (OSError, ValueError, IndexError):
            continue
    return False


PLANTED_START_S = 160.0  # a last start the default validity (PT5M) does not cover twice


@pytest.fixture(scope="module")
def restarted(cluster, under_tee):
    """The same job started again on its checkpoint, its output a pipe; Ctrl-C to the job alone once it decided.
    Before it starts, someone plants tick files in its journal for the ticks to come (their token removed)."""
    from quota_pipeline.streaming import start_time

    plant_foreign_ticks(cluster)
    sizes = archive_written(cluster)
    start_time.write(str(cluster.parent / "checkpoint"), start_time.Kept(PLANTED_START_S, time.time()))
    job = _job(cluster, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(job.stdout.readline, b"")), daemon=True)
    reader.start()
    text = lambda: b"".join(lines).decode(errors="replace")  # noqa: E731
    try:
        _wait_for(text, DECIDED, job)
        first_screen = text()
        mapped = mapped_by_jvm(job, _archive(cluster))
        deadline = time.monotonic() + 30  # a worker's line reaches the terminal through the log file
        while FOREIGN not in text() and time.monotonic() < deadline:
            time.sleep(0.2)
        job.send_signal(signal.SIGINT)
        code = job.wait(90)
        reader.join(10)
    finally:
        _end(job)
    return {"code": code, "first_screen": first_screen, "out": text(), "archive_sizes": sizes, "mapped": mapped,
            "archive_size": _archive(cluster).stat().st_size,
            "kept": start_time.read(str(cluster.parent / "checkpoint"))}


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


def test_the_first_start_writes_the_class_archive_in_the_background_and_the_restart_maps_it(under_tee, restarted):
    lines = under_tee["out"].splitlines()
    assert any("no JVM class archive on this host: the job writes one in the background" in line for line in lines)
    assert any("writing the JVM class archive" in line and "in the background (pid" in line for line in lines)
    # Written aside and renamed into place whole: the archive's path never held part of it.
    assert set(restarted["archive_sizes"]) <= {restarted["archive_size"]}, restarted["archive_sizes"][:20]
    assert restarted["mapped"], "the restarted job's JVM does not map the archive"
    assert "no JVM class archive" not in restarted["first_screen"]


def test_each_start_measures_itself_and_keeps_it_beside_the_checkpoint(under_tee, restarted):
    for run in (under_tee, restarted):
        kept, refused = run["kept"]
        assert refused is None and kept is not None and 1 < kept.seconds < START_TIMEOUT_S + 60, run["kept"]
        logged = [line for line in run["out"].splitlines() if "first decision published" in line]
        assert len(logged) == 1 and OWN_LINE.match(logged[0]), logged
        assert f"published {kept.seconds:.1f} s after the job's process started" in logged[0]
    assert restarted["kept"][0].seconds != PLANTED_START_S  # the planted one replaced by the restart's own


def test_a_start_warns_when_the_validity_does_not_cover_twice_the_last_start(restarted):
    warned = [line for line in restarted["first_screen"].splitlines()
              if "does not cover 2 x this job's last start" in line]
    assert len(warned) == 1 and " WARNING the readers' validity (300 s)" in warned[0], warned
    assert f"({PLANTED_START_S:.1f} s from process start to first published decision" in warned[0]


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


MAPPED = ("from quota_pipeline.session import get_session; s = get_session(master='local[1]'); "
          "args = s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments(); "
          "print(s.range(5).count(), any('TieredStopAtLevel=1' in str(a) for a in args), "
          "any('SharedArchiveFile' in str(a) for a in args))")


def _cli(*args: str, cache: Path, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=_env(cache), timeout=timeout)


def test_the_archive_run_wrote_is_whole_prepare_finds_it_and_spark_maps_it_compiling_with_c1_only(
        cluster, restarted, tmp_path):
    """The archive the first start wrote in the background (restarted waited for it): `prepare` finds it there; a
    Spark JVM maps it and compiles with C1 only; cut short (a copy), it is left alone and Spark starts without."""
    import shutil

    from quota_pipeline.commands.prepare import spark_log

    archive = _archive(cluster)
    assert archive.stat().st_size > 10 * 2 ** 20
    # The recording JVM's lines went to the log beside the archive, not to the job's terminal.
    assert "Dynamic dump" in spark_log(archive).read_text()
    again = _cli("-m", "quota_pipeline.cli", "prepare", cache=_cache(cluster), timeout=60)
    assert again.returncode == 0 and "there already" in again.stdout, again.stdout + again.stderr
    started = _cli("-c", MAPPED, cache=_cache(cluster))
    assert started.returncode == 0 and started.stdout.split()[-3:] == ["5", "True", "True"], started.stderr[-3000:]
    cut = tmp_path / "quota-pipeline" / archive.name
    cut.parent.mkdir()
    shutil.copy(archive.with_suffix(".size"), cut.with_suffix(".size"))
    with archive.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(archive.stat().st_size // 2))
    started = _cli("-c", MAPPED, cache=tmp_path)
    assert started.returncode == 0 and started.stdout.split()[-3:] == ["5", "True", "False"], started.stderr[-3000:]
