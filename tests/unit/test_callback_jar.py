"""The plugins' jar for the tests and benchmarks: Maven's own build of the current sources is taken as it is; one older
than a source, or not whole yet, is built again (harness/callback_jar.py)."""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from harness.callback_jar import MavenMissing, callback_jar

JAR = "quota-pipeline-broker-callback-0.1.0.jar"


@pytest.fixture
def module(tmp_path, monkeypatch) -> Path:
    """A module with a pom and one source; no Maven on PATH, so any build attempt shows as MavenMissing."""
    m = tmp_path / "broker-callback"
    (m / "src" / "main" / "java").mkdir(parents=True)
    (m / "pom.xml").write_text("<project/>")
    (m / "src" / "main" / "java" / "A.java").write_text("class A {}")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    return m


def built(module: Path, at: float | None = None) -> Path:
    jar = module / "target" / JAR
    jar.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    newest = max(p.stat().st_mtime for p in module.rglob("*") if p.is_file() and p != jar)
    os.utime(jar, (newest + 5, newest + 5) if at is None else (at, at))
    return jar


def test_the_jar_maven_built_after_the_last_change_is_taken_without_building(module, tmp_path):
    built(module)
    jar = callback_jar(cache=tmp_path / "cache", module=module)
    assert jar.name == JAR and jar.parent.parent.parent == tmp_path / "cache"
    assert zipfile.ZipFile(jar).namelist() == ["META-INF/MANIFEST.MF"]
    assert callback_jar(cache=tmp_path / "cache", module=module) == jar  # the second caller finds it in the cache


def test_a_source_changed_after_the_build_is_built_again(module, tmp_path):
    built(module, at=(module / "pom.xml").stat().st_mtime - 60)
    with pytest.raises(MavenMissing):
        callback_jar(cache=tmp_path / "cache", module=module)


def test_a_jar_being_written_is_not_taken(module, tmp_path):
    jar = built(module)
    stamp = jar.stat().st_mtime
    jar.write_bytes(b"PK\x03\x04 half")  # Maven's jar plugin mid-write
    os.utime(jar, (stamp, stamp))
    with pytest.raises(MavenMissing):
        callback_jar(cache=tmp_path / "cache", module=module)
