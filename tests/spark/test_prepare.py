"""`quota-pipeline prepare`: the JVM class archive written once, mapped by every Spark JVM after, never when broken."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from quota_pipeline import session

ROOT = Path(__file__).resolve().parents[2]
KEY = "spark.driver.extraJavaOptions"


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


def _cli(*args: str, cache: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)


MAPPED = ("from quota_pipeline.session import get_session; s = get_session(master='local[1]'); "
          "args = s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments(); "
          "print(s.range(5).count(), any('TieredStopAtLevel=1' in str(a) for a in args), "
          "any('SharedArchiveFile' in str(a) for a in args))")


def test_prepare_writes_the_archive_once_and_spark_starts_with_it_compiling_with_c1_only(tmp_path):
    done = _cli("-m", "quota_pipeline.cli", "prepare", cache=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [archive] = (tmp_path / "quota-pipeline").glob("*.jsa")
    assert archive.stat().st_size > 10 * 2 ** 20 and f"wrote {archive}" in done.stdout
    # Its terminal shows its own lines only; Spark's and its Python workers' are in the log beside the archive.
    assert "Python worker" not in done.stdout + done.stderr and "Dynamic dump" not in done.stdout + done.stderr
    assert "Dynamic dump" in archive.with_name(archive.stem + ".prepare.log").read_text()
    again = _cli("-m", "quota_pipeline.cli", "prepare", cache=tmp_path, timeout=60)
    assert again.returncode == 0 and "there already" in again.stdout
    started = _cli("-c", MAPPED, cache=tmp_path)
    assert started.returncode == 0 and started.stdout.split()[-3:] == ["5", "True", "True"], started.stderr[-3000:]
    # Cut short, the archive is left alone and Spark starts as without one.
    with archive.open("r+b") as f:
        f.truncate(archive.stat().st_size // 2)
    started = _cli("-c", MAPPED, cache=tmp_path)
    assert started.returncode == 0 and started.stdout.split()[-3:] == ["5", "True", "False"], started.stderr[-3000:]


def test_spark_submit_gives_the_driver_and_the_executors_the_same_compiler_option_as_a_local_start():
    # The shell script and the defaults file cannot import session.JIT: they spell it, and must not drift from it.
    assert f"-Dlog4j2.configurationFile=file:$log4j {session.JIT}" in (ROOT / "spark-submit.sh").read_text()
    defaults = dict(line.split(None, 1) for line in (ROOT / "conf" / "spark-defaults.conf").read_text().splitlines()
                    if line.strip() and not line.startswith("#"))
    assert defaults["spark.executor.extraJavaOptions"].strip() == session.JIT
