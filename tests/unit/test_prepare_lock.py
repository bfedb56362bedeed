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
