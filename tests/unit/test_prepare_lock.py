"""The class archive `run` writes in the background: one prepare at a time per archive, a background one leaves it
to the one at work (tests/spark/test_run_terminal.py writes and maps one)."""
from __future__ import annotations

import argparse
import fcntl
import os
from pathlib import Path

import pytest

from quota_pipeline import session


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
