"""One Kafka node's JVM: format, start in its own process group, wait until it serves metadata, stop; tmpfs mounts."""
from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from harness.kafka_config import NodeLayout
from quota_pipeline.session import carry_priority

_PR_SET_PDEATHSIG = 1
# Without the C2 compiler and G1 a JVM starts much faster on 2 cores (format 2.5 s vs 3.7 s, a 1-node cluster
# 6.7 s vs 11 s); tests use it, benchmarks keep Kafka's defaults.
FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class KafkaStartError(RuntimeError):
    """A node did not start; the message ends with the tail of its logs."""


class PortTaken(KafkaStartError):
    """A node could not bind one of its ports: another process took it between choosing and starting."""


def why_exited(log: str, returncode: int | None) -> str:
    """One sentence on why a node's JVM died, read from its log and exit code (a busy machine's usual causes)."""
    if "Address already in use" in log or "BindException" in log:
        return "one of its ports was taken by another process (a busy machine); the cluster is started again on new ports"
    if "insufficient memory for the Java Runtime" in log or "Cannot allocate memory" in log:
        return "the JVM could not reserve its heap: the machine is short of memory (free some, or lower the heap)"
    if "OutOfMemoryError" in log:
        return "the JVM ran out of heap (raise ClusterSpec.heap)"
    if returncode in (-9, 137):
        return "it was killed by SIGKILL (the kernel's OOM killer on a machine short of memory? see dmesg)"
    if "No space left on device" in log:
        return "its disk is full"
    return f"exit code {returncode}; the reason is in its log below"


class TmpfsUnavailable(RuntimeError):
    """A tmpfs log dir cannot be mounted here (not root, or mount refused)."""


def die_with_parent() -> None:
    # Runs in the child before exec: if the test process dies without cleaning up (SIGKILL), the JVM goes too.
    # kafka-server-start.sh and kafka-run-class.sh `exec` java, so the setting reaches the JVM itself.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def renice_session(delta: int) -> None:
    """In a child started in a session of its own, before exec: add `delta` to its niceness and give its session the
    result, where the kernel shares CPU time between sessions first (autogroup)."""
    os.nice(delta)
    carry_priority(os.getpid())


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"

# Kafka's log4j layout starts each server.log line with the local time: [2026-11-26 14:54:41,123].
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")


def log_lines(logs: Path, pattern: re.Pattern, after: float = 0.0) -> Iterator[tuple[float, re.Match]]:
    """(wall time, match) of the server.log lines in a node's `logs` directory (the hourly rolled ones first) at or
    after `after` that match `pattern`."""
    for path in sorted(logs.glob("server.log*"), key=lambda p: p.stat().st_mtime):
        for line in path.read_text(errors="replace").splitlines():
            stamp = LOG_TIME.match(line)
            found = pattern.search(line) if stamp else None
            if found:
                t = time.mktime(time.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")) + int(stamp.group(2)) / 1000
                if t >= after:
                    yield t, found


@dataclass
class NodeProcess:
    """A node's files (config, LOG_DIR) and its JVM while it runs."""

    home: Path
    layout: NodeLayout
    directory: Path
    properties: str
    heap: str
    jvm_opts: str | None = None  # KAFKA_JVM_PERFORMANCE_OPTS of the broker; None keeps Kafka's default
    process: subprocess.Popen | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self.properties)

    @property
    def config(self) -> Path:
        return self.directory / "server.properties"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def env(self, jvm_opts: str | None = None) -> dict[str, str]:
        env = {**os.environ, "LOG_DIR": str(self.logs), "KAFKA_HEAP_OPTS": f"-Xmx{self.heap} -Xms{self.heap}"}
        if jvm_opts is not None:
            env["KAFKA_JVM_PERFORMANCE_OPTS"] = jvm_opts
        return env

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        with open(self.directory / "stdout.log", "ab") as out:
            self.process = subprocess.Popen([str(self.home / "bin" / "kafka-server-start.sh"), str(self.config)],
                                            env=self.env(self.jvm_opts), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=die_with_parent)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, clean: bool, timeout: float = 60.0) -> None:
        """SIGTERM (controlled shutdown) when `clean`, else SIGKILL; the whole process group, waited for."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self._signal(signal.SIGTERM if clean else signal.SIGKILL)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(10)
        self.process = None

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self) -> str:
        return (f"--- {self.logs / 'server.log'} ---\n{tail(self.logs / 'server.log')}\n"
                f"--- {self.directory / 'stdout.log'} ---\n{tail(self.directory / 'stdout.log', 15)}")

    def whole_log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in (self.logs / "server.log", self.directory / "stdout.log")
                         if p.exists())

    def wait_ready(self, bootstrap: str, timeout: float) -> None:
        """Wait until the node answers a metadata request listing itself; on failure raise with its log tail."""
        node_id = self.layout.node_id
        try:
            wait_metadata({"bootstrap.servers": bootstrap}, node_id, timeout, alive=self.running)
        except ProcessLookupError:
            code = None if self.process is None else self.process.returncode
            log = self.log_tail()
            why = why_exited(self.whole_log(), code)  # the cause is often far above the shutdown lines of the tail
            error = PortTaken if why.startswith("one of its ports") else KafkaStartError
            raise error(f"Kafka node {node_id} exited (code {code}) before it served metadata: {why}; "
                        f"see its log:\n{log}") from None
        except TimeoutError as exc:
            raise KafkaStartError(f"{exc}; see its log:\n{self.log_tail()}") from None


def wait_metadata(conf: Mapping[str, Any], node_id: int, timeout: float,
                  alive: Callable[[], bool] = lambda: True) -> None:
    """Wait until a metadata request over `conf` lists `node_id` as an active (unfenced) broker."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({**conf, "log_level": 0})
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise ProcessLookupError(node_id)
        try:
            if node_id in admin.list_topics(timeout=1).brokers:
                return
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka node {node_id} was not listed by a metadata request on "
                               f"{conf['bootstrap.servers']} within {timeout:.0f} s")
        time.sleep(0.2)


def format_storage(node: NodeProcess, cluster_id: str) -> None:
    """kafka-storage.sh format for a static quorum (controller.quorum.voters), as Kafka >= 3.3 accepts it."""
    done = subprocess.run([str(node.home / "bin" / "kafka-storage.sh"), "format", "-t", cluster_id,
                           "-c", str(node.config)], env=node.env(FAST_START_JVM), capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise KafkaStartError(f"kafka-storage.sh format failed for node {node.layout.node_id}:\n"
                              f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


def mount_tmpfs(directory: Path, size_mb: int) -> None:
    """Mount a tmpfs of `size_mb` MiB on `directory` so that Kafka really hits ENOSPC there."""
    if os.geteuid() != 0:
        raise TmpfsUnavailable("a tmpfs log dir needs root (mount -t tmpfs); run the tests as root to enable it")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(directory)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise TmpfsUnavailable(f"mount -t tmpfs refused ({done.stderr.strip()}); a privileged container or root "
                               "on a host can run this test")


def unmount(directory: Path) -> None:
    # Lazy unmount as a fallback: a process we did not start may still hold a file open there.
    if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)
