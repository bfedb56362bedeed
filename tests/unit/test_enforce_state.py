"""Where `enforce` keeps its baseline and refusal state files: never the job's relative default (./checkpoints),
which a container loses with its working directory, and in the job's image never a relative path at all; a state
directory that cannot be used is said in one line before anything is sent to the cluster."""
from __future__ import annotations

import pytest

from quota_pipeline.cli import main
from quota_pipeline.core import config as cfg
from quota_pipeline.enforce import baseline
from quota_pipeline.enforce.baseline import ABSOLUTE_STATE_ENV

UNREACHABLE = "127.0.0.1:1"  # nothing listens: a command that got as far as the cluster would fail otherwise


def props(tmp_path, **extra: str):
    path = tmp_path / "c.properties"
    lines = {cfg.BOOTSTRAP: UNREACHABLE, cfg.HARD_BYTES: "1", cfg.CLUSTER_NAME: "c1", **extra}
    path.write_text("\n".join(f"{k}={v}" for k, v in lines.items()))
    return path


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_without_a_checkpoint_path_the_state_goes_to_var_lib_not_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(baseline, "DEFAULT_STATE_ROOT", str(tmp_path / "file" / "qp"))  # a directory that cannot be
    assert main(["enforce", str(props(tmp_path)), "--once"]) == 2
    [line] = error_lines(capsys)
    assert line.startswith("error: ") and str(tmp_path / "file" / "qp" / "enforce") in line
    assert cfg.CHECKPOINT_PATH in line and "nothing was changed" in line
    assert not (tmp_path / "checkpoints").exists()
    monkeypatch.undo()
    assert baseline.DEFAULT_STATE_ROOT == "/var/lib/quota-pipeline"


@pytest.mark.parametrize("where", [["--baseline", "state/c1.json"], []])
def test_in_the_image_a_relative_state_path_is_refused_in_one_line(tmp_path, monkeypatch, capsys, where):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ABSOLUTE_STATE_ENV, "1")
    conf = props(tmp_path, **{cfg.CHECKPOINT_PATH: "ckpt"})
    assert main(["enforce", str(conf), "--once", *where]) == 2
    [line] = error_lines(capsys)
    assert "is relative" in line and "/ABSOLUTE/PATH" in line and ABSOLUTE_STATE_ENV in line
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "state").exists()


def test_the_jobs_image_sets_what_refuses_a_relative_state_path(tmp_path, monkeypatch, capsys):
    from pathlib import Path
    dockerfile = (Path(__file__).resolve().parents[2] / "deploy" / "job" / "Dockerfile").read_text()
    [value] = [line.split("=", 1)[1] for line in dockerfile.splitlines() if line.startswith(f"ENV {ABSOLUTE_STATE_ENV}=")]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ABSOLUTE_STATE_ENV, value)
    assert main(["enforce", str(props(tmp_path, **{cfg.CHECKPOINT_PATH: "./checkpoints"})), "--once"]) == 2
    assert "is relative" in error_lines(capsys)[0]
