"""`quota-pipeline prepare`, the JVM class archive `run` also writes in the background: mapped only when whole, one
prepare at a time per archive, a failure on a busy host tried again, the same compiler option everywhere
(tests/spark/test_run_terminal.py writes one from a fresh install's empty cache, maps it and asks prepare again)."""
from __future__ import annotations

import argparse
import fcntl
import os
from pathlib import Path

import pytest

from quota_pipeline import session

ROOT = Path(__file__).resolve().parents[2]
KEY = "spark.driver.extraJavaOptions"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if session.archive_path() is None:
        pytest.skip("no Java: the archive has no name")
    return tmp_path


def test_a_background_prepare_leaves_the_archive_to_the_one_writing_it(cache, capsys):
    from quota_pipeline.commands import prepare

    path = session.archive_path()
    path.parent.mkdir(parents=True)
    with open(path.with_suffix(".lock"), "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another prepare at work (a lock of another open file, as another process's)
        assert prepare.run(argparse.Namespace(background=True, force=False)) == 0
    assert capsys.readouterr().out.strip() == f"another prepare is writing the class archive {path}"
    assert not path.exists()
    assert os.getpriority(os.PRIO_PROCESS, 0) != prepare.BACKGROUND_NICE  # it left before lowering its priority


@pytest.fixture
def busy_host(cache, monkeypatch):
    """_record failing as Spark did on a busy host (its Python worker not connecting back in time) until the third
    call; the background's pause and priority made harmless to this process."""
    from quota_pipeline.commands import prepare

    calls: list[Path] = []

    def record(path: Path) -> int:
        calls.append(path)
        if len(calls) < 3:
            raise RuntimeError("Python worker failed to connect back.\n\tat org.apache.spark.api.python...")
        path.write_bytes(b"archive")
        return 7

    monkeypatch.setattr(prepare, "_record", record)
    monkeypatch.setattr(prepare, "BACKGROUND_PAUSE_S", 0.0)
    monkeypatch.setattr(prepare.os, "setpriority", lambda *a: None)
    monkeypatch.setattr(session, "carry_priority", lambda pid: None)
    monkeypatch.setattr(prepare, "configure_logging", lambda **kw: None)
    return calls


def test_a_background_prepare_that_fails_on_a_busy_host_tries_again_and_writes_the_archive(busy_host, capsys):
    from quota_pipeline.commands import prepare

    assert prepare.run(argparse.Namespace(background=True, force=False)) == 0
    out = capsys.readouterr().out
    assert len(busy_host) == 3
    assert out.count("trying again") == 2 and "(2 of 3)" in out and "(3 of 3)" in out, out
    assert "failed to connect back" in out and "org.apache.spark" not in out  # one line each, no JVM stack
    assert "wrote " in out


def test_prepare_on_demand_fails_at_once_with_one_line(busy_host, capsys):
    from quota_pipeline.commands import prepare

    assert prepare.run(argparse.Namespace(background=False, force=False)) == 1
    err = capsys.readouterr().err
    assert len(busy_host) == 1
    assert err.count("\n") == 1 and err.startswith("error: could not write the class archive"), err


def test_the_archive_is_mapped_only_when_it_is_there_whole(tmp_path):
    archive = tmp_path / "spark.jsa"
    base = {KEY: "-Dlog4j2.configurationFile=x"}
    assert session._java_options(base, archive, record=False) == base  # none written yet
    archive.write_bytes(b"\0" * 1000)
    archive.with_suffix(".size").write_text("1000\n")
    assert session._java_options(base, archive, record=False)[KEY].split()[:2] == [
        "-Dlog4j2.configurationFile=x", f"-XX:SharedArchiveFile={archive}"]
    # Cut short (a disk that filled, a copy that stopped): a JVM mapping it would die of SIGBUS, so it is not used.
    archive.write_bytes(b"\0" * 500)
    assert session._java_options(base, archive, record=False) == base
    assert "-XX:+RecordDynamicDumpInfo" in session._java_options(base, archive, record=True)[KEY]


def test_spark_submit_gives_the_driver_and_the_executors_the_same_compiler_option_as_a_local_start():
    # The shell script and the defaults file cannot import session.JIT: they spell it, and must not drift from it.
    assert f"-Dlog4j2.configurationFile=file:$log4j {session.JIT}" in (ROOT / "spark-submit.sh").read_text()
    defaults = dict(line.split(None, 1) for line in (ROOT / "conf" / "spark-defaults.conf").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    assert defaults["spark.executor.extraJavaOptions"].strip() == session.JIT


def test_prepare_on_demand_writes_the_archive_and_says_where(busy_host, capsys, monkeypatch):
    from quota_pipeline.commands import prepare

    monkeypatch.setattr(prepare, "_record", lambda path: path.write_bytes(b"archive") or 7)
    assert prepare.run(argparse.Namespace(background=False, force=False)) == 0
    out = capsys.readouterr().out
    path = session.archive_path()
    assert f"Spark's own lines go to {prepare.spark_log(path)}" in out and f"wrote {path}" in out, out
