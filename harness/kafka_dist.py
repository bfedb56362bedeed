"""Kafka brokers of other versions, assembled from Maven Central with the start scripts of the KAFKA_HOME distribution.

A distribution is `bin/` and `config/` of KAFKA_HOME and a `libs/` of `org.apache.kafka:kafka_2.13:<version>` with its
runtime dependencies (the broker, and the StorageTool kafka-storage.sh runs), plus Log4j 2, which the scripts
configure (Kafka 3.9's own Log4j 1 calls go through its bridge). It is built once per version into a cache outside
the repository (`$QUOTA_PIPELINE_CACHE`, default `~/.cache/quota-pipeline`) and reused; a half-built one is never used.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# The newest patch of each minor version an operator runs today (Strimzi and Apache); the last is the newest.
# The newest patch of each line an operator runs, the shared 4.1.0, and the .0 and later patches of 4.2 and 4.3,
# where KAFKA-20746's backport landed in a patch release (bench/kafka_versions.py finds which). The newest last.
VERSIONS = ("3.9.2", "4.0.2", "4.1.0", "4.1.2", "4.2.0", "4.2.1", "4.2.2", "4.3.0", "4.3.1", "4.4.0")
NEWEST = VERSIONS[-1]
LOG4J = "2.24.3"
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.quotapipeline.harness</groupId>
  <artifactId>kafka-dist</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""
ARTIFACTS = (("org.apache.kafka", "kafka_2.13", None),
             ("org.apache.logging.log4j", "log4j-core", LOG4J), ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J),
             ("org.apache.logging.log4j", "log4j-1.2-api", LOG4J))

# Kafka 3.9 ships Log4j 1; the scripts' Log4j 2 configuration is YAML, which needs Jackson's YAML module (4.x has it).
JACKSON_YAML = (("com.fasterxml.jackson.dataformat", "jackson-dataformat-yaml", "2.16.2"),)


def extra(version: str) -> tuple[tuple[str, str, str], ...]:
    return JACKSON_YAML if version.startswith("3.") else ()


class AssemblyFailed(RuntimeError):
    """Maven could not resolve a version (offline, or a version Maven Central does not serve)."""


def cache_root() -> Path:
    return Path(os.environ.get("QUOTA_PIPELINE_CACHE") or Path.home() / ".cache" / "quota-pipeline") / "kafka"


def pom(version: str) -> str:
    deps = "\n".join(f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                     f"<version>{v or version}</version></dependency>"
                     for g, a, v in (*ARTIFACTS, *extra(version)))
    return POM.format(dependencies=deps)


def assemble(version: str, scripts_from: Path, cache: Path | None = None) -> Path:
    """The distribution of `version` (built on the first call): KAFKA_HOME's bin/ and config/, Maven's libs/."""
    if Path(scripts_from, "libs", f"kafka_2.13-{version}.jar").exists():
        return scripts_from  # the distribution itself
    home = (cache or cache_root()) / f"kafka_2.13-{version}"
    if (home / "libs" / f"kafka_2.13-{version}.jar").exists():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=home.parent))
    try:
        (work / "pom.xml").write_text(pom(version))
        done = subprocess.run(["mvn", "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
                               f"-DoutputDirectory={work / 'dist' / 'libs'}", "-DincludeScope=runtime"],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise AssemblyFailed(f"Kafka {version} could not be assembled from Maven Central: "
                                 f"{(done.stdout + done.stderr).strip()[-600:]}")
        for jar in (work / "dist" / "libs").glob("*reload4j*.jar"):  # Kafka 3.9's Log4j 1: Log4j 2 replaces it
            jar.unlink()
        for part in ("bin", "config"):
            shutil.copytree(scripts_from / part, work / "dist" / part)
        try:
            (work / "dist").rename(home)  # whole or not at all
        except OSError:  # another process finished the same version first
            if not (home / "libs" / f"kafka_2.13-{version}.jar").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return home
