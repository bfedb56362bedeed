"""What spark-submit.sh packs for executors on other hosts: the job's run-time dependencies at the installed versions,
never a second pyspark, nor what only the driver needs to build the archive."""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from quota_pipeline.commands import submit_environment as env


def test_the_pack_pins_every_run_time_dependency_at_its_installed_version() -> None:
    pins = dict(r.split("==") for r in env.pinned_requirements())
    for name in ("numba", "pyarrow", "pandas", "confluent-kafka", "isodate", "llvmlite"):  # llvmlite: numba's own
        assert pins[name] == metadata.version(name), name
    assert not {"pyspark", "py4j", "venv-pack", "pytest", "quota-pipeline"} & set(pins)


def test_the_archive_is_named_by_the_versions_it_holds(tmp_path: Path) -> None:
    a = env.archive_path(tmp_path, ["numba==0.60.0"])
    assert a == env.archive_path(tmp_path, ["numba==0.60.0"]) != env.archive_path(tmp_path, ["numba==0.61.0"])
    assert a.parent == tmp_path and a.name.endswith(".tar.gz")


def test_wrong_usage_says_how_and_exits_2() -> None:
    out = subprocess.run([sys.executable, "-m", "quota_pipeline.commands.submit_environment"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("usage:") and "Traceback" not in out.stderr
