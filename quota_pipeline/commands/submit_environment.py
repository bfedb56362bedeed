"""What spark-submit.sh ships to executors on other hosts: the job's Python dependencies as a packed environment.

`python -m quota_pipeline.commands.submit_environment BUILD_DIR` prints the path of a venv-pack archive holding every
package the installed quota-pipeline needs at run time, at the versions installed here, except pyspark and py4j,
which each Spark installation ships itself (its python/lib zips). The archive is built once per set of versions and
this interpreter's version (a venv in BUILD_DIR, installed with pip, then packed) and reused after. Executors unpack
it (`--archives ARCHIVE#environment`) and run `./environment/bin/python`; the package itself travels apart
(spark-submit.sh's zip), so a change to the code does not rebuild it.

A venv refers to the interpreter it was made from: the executors' hosts need the same Python version at the same
path (docs/deployment.md says what to do when they do not).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "quota-pipeline"
SPARK_SHIPS = {"pyspark", "py4j"}  # from each Spark installation's python/lib, never from the archive
EXTRAS = ("s3",)  # shipped when installed here: executors write an s3:// journal
SUBMIT_ONLY = {"venv-pack", "packaging"}  # the project needs these to build the archive, executors do not


class PackError(Exception):
    """The archive could not be built; the message says what to do."""


def pinned_requirements(project: str = PROJECT, extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """`name==version` for every distribution `project` needs at run time (and the `extras` whose packages are
    installed), as installed in this environment, sorted; pyspark and py4j left out."""
    wanted: dict[str, str] = {}
    todo = [(project, set(extras))]
    while todo:
        name, chosen = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name == project:
                raise PackError(f"{project} is not installed for {sys.executable}; "
                                f"run: {sys.executable} -m pip install -e .") from None
            continue  # an extra's package that is not installed here: not shipped
        key = canonicalize_name(dist.metadata["Name"])
        if key != canonicalize_name(project):
            if key in wanted:
                continue
            wanted[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if canonicalize_name(req.name) in SPARK_SHIPS or (
                    name == project and canonicalize_name(req.name) in SUBMIT_ONLY):
                continue
            in_extra = [e for e in chosen if req.marker and req.marker.evaluate({"extra": e})]
            if req.marker and not in_extra and not req.marker.evaluate({"extra": ""}):
                continue
            todo.append((req.name, set(req.extras)))
    return sorted(f"{name}=={version}" for name, version in wanted.items())


def archive_path(build: Path, requirements: list[str]) -> Path:
    """Where the archive of these requirements for this interpreter's version lives."""
    digest = hashlib.sha256("\n".join([sys.version.split()[0], *requirements]).encode()).hexdigest()[:16]
    return build / f"environment-{digest}.tar.gz"


def build_archive(build: Path) -> Path:
    """The archive for this environment, built unless it exists (written aside, then moved into place whole)."""
    requirements = pinned_requirements()
    target = archive_path(build, requirements)
    if target.exists():
        return target
    try:
        import venv_pack
    except ImportError:
        raise PackError(f"venv-pack is not installed for {sys.executable}; "
                        f"run: {sys.executable} -m pip install venv-pack") from None
    build.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=build, prefix=".environment-"))
    try:
        print(f"packing the job's Python dependencies for the executors ({len(requirements)} packages, once) "
              f"into {target}", file=sys.stderr)
        # Without pip of its own: this interpreter's pip installs into it (executors need no installer).
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(work / "venv" / "bin" / "python"),
                              "install", "--quiet", "--disable-pip-version-check", *requirements], stdout=sys.stderr)
        if pip.returncode:
            raise PackError(f"pip could not install the job's dependencies into {work / 'venv'} (above); "
                            "point pip at a package index or wheelhouse you can reach (PIP_INDEX_URL, "
                            "PIP_FIND_LINKS) and run again")
        # The packages' own test suites are never imported by the job (pandas' alone is tens of MB); a fast
        # compression, since every executor of every start unpacks the archive.
        venv_pack.pack(prefix=str(work / "venv"), output=str(work / "environment.tar.gz"), verbose=False,
                       compress_level=1, filters=[("exclude", "lib/python*/site-packages/*/tests/*")])
        os.chmod(work / "environment.tar.gz", 0o644)
        os.replace(work / "environment.tar.gz", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m quota_pipeline.commands.submit_environment BUILD_DIR", file=sys.stderr)
        return 2
    try:
        print(build_archive(Path(argv[0]).resolve()))
    except PackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
