"""The built wheel, installed in a fresh virtual environment outside the checkout, runs every entry command."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from harness.ports import free_port_block

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv that sees the machine's packages (pyspark is large) but has its own quota-pipeline from the wheel."""
    work = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(work / "dist")], check=True, cwd=work)
    wheel = next((work / "dist").glob("quota_pipeline-*.whl"))
    # Not --system-site-packages: from inside a virtual environment that exposes the base interpreter's packages,
    # not the running environment's (a fresh machine has pyspark & co only in the latter). A .pth line puts the
    # running environment's site-packages after the new venv's own, so the wheel's copy is the one imported; no
    # .pth file of the running environment is executed, so its editable install of the checkout stays out.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
    own = subprocess.run([str(work / "venv/bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, text=True, capture_output=True).stdout.strip()
    running = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(own, "running-environment.pth").write_text("".join(f"{p}\n" for p in sorted(running)))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(work / "venv/bin/python"), "install", "-q",
                    "--no-deps", "--ignore-installed", str(wheel)], check=True, cwd=work)
    return work


def run(venv: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    return subprocess.run([str(venv / "venv/bin/quota-pipeline"), *args], cwd=venv, env=env, text=True,
                          capture_output=True, timeout=timeout)


def installed(venv: Path, expression: str) -> str:
    out = subprocess.run([str(venv / "venv/bin/python"), "-c", f"import quota_pipeline.resources as r; print({expression})"],
                         cwd=venv, text=True, capture_output=True, check=True)
    return out.stdout.strip()


def test_the_package_comes_from_the_wheel_not_the_checkout(venv):
    location = installed(venv, "r.__file__")
    assert str(venv / "venv") in location and str(ROOT) not in location


def test_validate_an_example_config(venv):
    example = installed(venv, "r.path('examples/example.properties')")
    result = run(venv, "validate", example)
    assert result.returncode == 0, result.stderr
    assert "client.quota.callback.static.throttle.factor.validity.duration=" in result.stdout


def test_simulate_serves_for_a_few_seconds(venv):
    port = free_port_block(3)  # the simulated brokers take consecutive ports from the first
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    sim = subprocess.Popen([str(venv / "venv/bin/quota-pipeline"), "simulate", "--brokers", "2", "--log-dirs", "1",
                            "--port", str(port)], cwd=venv, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        time.sleep(4)
        assert sim.poll() is None, sim.stderr.read()
        observed = run(venv, "observe", "--bootstrap-server", f"127.0.0.1:{port}")
        assert observed.returncode == 0, observed.stderr
        snapshot = json.loads(observed.stdout)
        assert snapshot["status"] == "SUCCESS" and sorted(snapshot["brokers"]) == [1, 2]
    finally:
        sim.send_signal(signal.SIGTERM)
        out, err = sim.communicate(timeout=20)
    assert f"127.0.0.1:{port}" in out and "Traceback" not in err


def test_demo_help(venv):
    result = run(venv, "demo", "--help")
    assert result.returncode == 0 and "simulated" in result.stdout


def test_replay_the_example_journal(venv):
    examples = installed(venv, "r.path('examples')")
    result = run(venv, "replay", "--config", f"{examples}/example.properties", "--input",
                 f"{examples}/journal.jsonl", "--output", "out/decisions.jsonl", "--driver-memory", "1g", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (venv / "out/decisions.jsonl").read_text().splitlines()]
    assert len(records) == 400 and {r["cluster_id"] for r in records} == {"prod-east", "prod-west"}


def test_the_package_loads_a_config_when_imported_from_a_zip(tmp_path):
    """spark-submit.sh ships the package to executors as a zip: package data must be read through importlib's
    resources (a filesystem path into a zip names no file), as the job does when it loads its configuration."""
    import zipfile
    archive = tmp_path / "quota_pipeline.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in (ROOT / "quota_pipeline").rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(ROOT))
    example = ROOT / "conf/examples/example.properties"
    code = (f"from quota_pipeline.core import config; "
            f"import quota_pipeline; assert quota_pipeline.__file__.startswith({str(archive)!r}), quota_pipeline.__file__; "
            f"config.load({str(example)!r}); from quota_pipeline import resources; resources.schema('volume_snapshot')")
    # The archive on PYTHONPATH comes before the installed (editable) package, as the executors' --py-files zip does.
    env = {**os.environ, "PYTHONPATH": str(archive)}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
