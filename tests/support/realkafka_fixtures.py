"""pytest fixtures for real-Kafka tests: clusters started lazily on first use, skipped without KAFKA_HOME."""
from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Iterator

import pytest

from harness.callback_jar import MavenMissing, callback_jar as build_callback_jar
from harness.kafka import ClusterSpec, KafkaUnavailable, RealKafka, kafka_home, start_cluster
from harness.kafka_process import FAST_START_JVM, TmpfsUnavailable

TMPFS_MB = 64


def _interrupt_on_sigterm() -> None:
    # A SIGTERM (e.g. a CI timeout) would end pytest without finalizers or atexit; as an interrupt, pytest tears
    # the session down and the clusters are stopped (a SIGKILL is covered by the nodes' parent-death signal).
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


def _start(spec: ClusterSpec) -> RealKafka:
    try:
        home = kafka_home()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    _interrupt_on_sigterm()
    return start_cluster(spec, home)


@pytest.fixture(scope="session")
def callback_jar() -> Path:
    """The broker plugins' jar, built by Maven as a user would (`mvn package -DskipTests`), once per version of its
    sources for every worker and session (build/callback-jar/); skipped without KAFKA_HOME or Maven."""
    try:
        kafka_home()
    except KafkaUnavailable as exc:
        pytest.skip(str(exc))
    try:
        return build_callback_jar()
    except MavenMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def real_kafka() -> Iterator[RealKafka]:
    """A 1-node KRaft cluster (node 1, broker+controller) with two log dirs, PLAINTEXT, SCRAM and SSL listeners."""
    cluster = _start(ClusterSpec(nodes=1, log_dirs=2, jvm_opts=FAST_START_JVM))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def real_kafka3() -> Iterator[RealKafka]:
    """A 3-node KRaft cluster (nodes 1-3, each broker+controller, static voters), one log dir each."""
    cluster = _start(ClusterSpec(nodes=3, log_dirs=1, jvm_opts=FAST_START_JVM))
    yield cluster
    cluster.stop()


@pytest.fixture
def real_kafka_tmpfs() -> Iterator[RealKafka]:
    """A fresh 1-node cluster whose second log dir is a 64 MiB tmpfs (root only), for tests that fill a disk."""
    try:
        cluster = _start(ClusterSpec(nodes=1, log_dirs=2, tmpfs_mb=TMPFS_MB, jvm_opts=FAST_START_JVM))
    except TmpfsUnavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()
