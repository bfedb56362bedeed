"""A Spark standalone cluster on loopback (a master and workers from the pyspark installation), for tests and bench."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from harness.ports import free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """`with StandaloneCluster(tmp_path, workers=2) as c: c.master_url` - stopped (every JVM) on exit, even on failure.

    Each worker gets `cores` cores and `memory` for its executors; the daemons themselves get `daemon_memory`.
    Logs and work dirs (executors' stdout/stderr, the files spark-submit ships) are under `work`.
    """

    work: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    daemon_memory: str = "256m"
    # Each worker's scratch space (SPARK_LOCAL_DIRS: shuffle files, RocksDB's working copies; TMPDIR) under its own
    # work dir, as on hosts of their own; by default /tmp, which the driver uses too.
    own_dirs: bool = False
    # The workers' PYSPARK_PYTHON, as a host of their own would set it (None: whatever this environment has).
    python: str | None = None
    master_port: int = field(default_factory=free_port)
    master_ui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def worker_dir(self, i: int) -> Path:
        return self.work / f"worker-{i}"

    def _env(self) -> dict[str, str]:
        # SPARK_LOCAL_IP keeps every listener (and what the master advertises) on loopback.
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_DAEMON_MEMORY": self.daemon_memory, "SPARK_LOG_DIR": str(self.work / "logs"),
               "SPARK_WORKER_MEMORY": self.memory, "SPARK_WORKER_CORES": str(self.cores)}
        if self.python:
            env["PYSPARK_PYTHON"] = self.python
        return env

    def _spawn(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.work / f"{name}.log").open("ab")
        # A session of its own: stop() signals the JVM's process group, whatever spark-class forked.
        proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                env={**self._env(), **(env or {})},
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self.processes.append(proc)
        return proc

    def start(self, timeout: float = 60.0, wait: bool = True) -> "StandaloneCluster":
        """Spawn the master and the workers; with wait=False return at once (an application submitted meanwhile
        retries its registration with the master), and call wait_for_workers() later."""
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.master_port), "--webui-port", str(self.master_ui_port))
            for i in range(self.workers):
                self.worker_dir(i).mkdir(exist_ok=True)
                own = {}
                if self.own_dirs:
                    own = {"SPARK_LOCAL_DIRS": str(self.worker_dir(i) / "local"),
                           "TMPDIR": str(self.worker_dir(i) / "tmp")}
                    for d in own.values():
                        Path(d).mkdir(exist_ok=True)
                self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                            "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                            "--work-dir", str(self.worker_dir(i)), "--webui-port", str(free_port()), env=own)
            if wait:
                self.wait_for_workers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict:
        """The master's JSON status: workers, active and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=2) as r:
            return json.load(r)

    def wait_for_workers(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        alive = 0
        while time.monotonic() < deadline:
            dead = [p for p in self.processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Spark daemon exited with {dead[0].returncode}; see {self.work}/*.log")
            try:
                alive = sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))
            except OSError:
                alive = 0  # the master's web UI is not up yet
            if alive >= self.workers:
                return
            time.sleep(0.3)
        raise RuntimeError(f"{alive} of {self.workers} Spark workers registered within {timeout:.0f} s; "
                           f"see {self.work}/*.log")

    def executor_logs(self) -> Iterator[Path]:
        """Every executor's stderr under the workers' work dirs."""
        for i in range(self.workers):
            yield from sorted(self.worker_dir(i).glob("app-*/*/stderr"))

    def python_workers(self) -> list[tuple[Path, str]]:
        """(working directory, the interpreter as started) of each Python process running in a worker's work dir:
        the executors' Python workers."""
        found = []
        for proc in Path("/proc").iterdir():
            try:
                cwd = Path(os.readlink(proc / "cwd"))
                argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except (OSError, ValueError):
                continue
            if "python" in Path(argv0).name and cwd.is_relative_to(self.work):
                found.append((cwd, argv0))
        return found

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.poll() is None]

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to every daemon's process group (workers first: they end their executors), then SIGKILL."""
        for proc in reversed(self.processes):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + timeout
        for proc in reversed(self.processes):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group, executors included
            except ProcessLookupError:
                pass
            proc.wait(5)
        self.processes.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
