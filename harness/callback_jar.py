"""The broker plugins' jar (broker-callback/), built by Maven once per version of its sources and shared by every user."""
from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "broker-callback"
CACHE = REPO / "build" / "callback-jar"
KEEP = 3  # the sources change often: the newest three builds are kept


class BuildFailed(Exception):
    """Maven could not package the jar; the message holds the end of its output."""


class MavenMissing(BuildFailed):
    """There is no Maven to build the jar with; the message says how to install it."""


def _sources(module: Path) -> list[Path]:
    """What the jar is built from: the pom and src/main (tests do not change the jar)."""
    return sorted(p for p in [module / "pom.xml", *(module / "src" / "main").rglob("*")] if p.is_file())


def sources_digest(module: Path = MODULE) -> str:
    """A digest of what the jar is built from (_sources)."""
    h = hashlib.sha256()
    for p in _sources(module):
        h.update(str(p.relative_to(module)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _jar_in(build: Path) -> Path | None:
    jars = [j for j in (build / "target").glob("quota-pipeline-broker-callback-*.jar")
            if not j.name.endswith(("-sources.jar", "-javadoc.jar"))]
    return jars[0] if len(jars) == 1 else None


def callback_jar(cache: Path = CACHE, module: Path = MODULE) -> Path:
    """The jar of the current sources: from the cache, else the module's own when Maven built it after their last
    change, else built (`mvn package -DskipTests`) from a copy of the module, so a build of the original elsewhere
    (`mvn verify`, an editor) never races it. Concurrent callers (two
    pytest-xdist workers, a campaign beside the suite) wait on one lock and the second finds the first one's jar."""
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / sources_digest(module)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _jar_in(out)
        if found:
            return found
        tmp = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
        built = _built_from_these_sources(module)
        if built is not None:  # `mvn verify` (the README's test command) has just built it: taken, not built again
            (tmp / "target").mkdir()
            shutil.copy2(built, tmp / "target" / built.name)
            return _keep(cache, tmp, out)
        try:
            shutil.copy2(module / "pom.xml", tmp / "pom.xml")
            shutil.copytree(module / "src" / "main", tmp / "src" / "main")
            done = subprocess.run(["mvn", "-q", "-B", "-f", str(tmp), "package", "-DskipTests"],
                                  capture_output=True, text=True, timeout=900)
        except FileNotFoundError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise MavenMissing("Maven (mvn) is needed to build broker-callback/; install maven "
                              "(Debian: apt-get install maven) or put mvn on PATH") from None
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildFailed(f"mvn package of broker-callback failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return _keep(cache, tmp, out)


def _built_from_these_sources(module: Path) -> Path | None:
    """The module's own jar (module/target) when Maven wrote it after the last change to what it is built from, whole
    (a build running meanwhile leaves a jar that is not a zip yet, or older than its sources)."""
    jar = _jar_in(module)
    if jar is None:
        return None
    try:
        if jar.stat().st_mtime <= max(p.stat().st_mtime for p in _sources(module)):
            return None
        with zipfile.ZipFile(jar) as z:
            if "META-INF/MANIFEST.MF" not in z.namelist():
                return None
    except (OSError, zipfile.BadZipFile):
        return None
    return jar


def _keep(cache: Path, tmp: Path, out: Path) -> Path:
    """The build in `tmp` renamed to `out`, the oldest builds beyond KEEP removed; its jar."""
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    builds = sorted((d for d in cache.iterdir() if d.is_dir() and not d.name.startswith("build-")),
                    key=lambda d: d.stat().st_mtime)
    for old in builds[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    jar = _jar_in(out)
    if jar is None:
        raise BuildFailed(f"mvn package left no single quota-pipeline-broker-callback jar in {out / 'target'}")
    return jar
