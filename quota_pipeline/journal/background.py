"""The streaming job's journal maintenance: a daemon thread on the driver running passes in a child process.

The child (`python -m quota_pipeline.journal.background`, niced) gets the clusters as one JSON line on stdin,
runs a pass over each every few seconds and prints one JSON report per pass; it stops when stdin closes,
so it also ends with a driver killed by -9. Killing it at any point is safe (compaction.py says why).
Only the driver runs it: executors on other hosts only write tick files.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from typing import Any, Callable

from quota_pipeline.journal.maintenance import ClusterJournal

log = logging.getLogger("quota_pipeline")
NICE = 19  # the lowest priority: a pass may take longer, a micro-batch must not


def every_seconds(clusters: list[ClusterJournal]) -> float:
    """A pass a minute (the metrics' freshness); more often when periods are shorter than four minutes."""
    shortest = min(c.period.total_seconds() for c in clusters)
    return max(1.0, min(60.0, shortest / 4))


class Maintenance:
    """Starts, watches and restarts the child; hands every report to `on_report` (metrics and log)."""

    def __init__(self, clusters: list[ClusterJournal], on_report: Callable[[dict], None]) -> None:
        self.clusters = clusters
        self.on_report = on_report
        self._stop = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.clusters:
            self._thread = threading.Thread(target=self._watch, name="journal-maintenance", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None:
            _close(proc.stdin)  # the child finishes its current step and exits
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()  # safe at any step
                proc.wait()
        if self._thread is not None:
            self._thread.join(timeout)

    def _watch(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            self._proc = proc = subprocess.Popen(
                [sys.executable, "-m", "quota_pipeline.journal.background"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, start_new_session=True)  # no terminal signals: stdin ends it
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps({"clusters": [c.to_json() for c in self.clusters],
                                         "every": every_seconds(self.clusters)}) + "\n")
            proc.stdin.flush()
            for line in proc.stdout:
                self._report(line)
            code = proc.wait()
            if self._stop.is_set():
                return
            log.warning("journal maintenance stopped (exit code %s); restarting it in %.0fs", code, backoff)
            self._stop.wait(backoff)
            backoff = min(60.0, backoff * 2)

    def _report(self, line: str) -> None:
        try:
            report = json.loads(line)
        except ValueError:
            log.warning("journal maintenance: %s", line.strip())
            return
        self.on_report(report)


def log_report(report: dict) -> None:
    """What a pass did, one line per period, problems as warnings."""
    name = report["cluster"]
    for p in report.get("pruned", []):
        log.info("journal %s: deleted period %s past retention (%d files, %d bytes)", name, p["period"],
                 p["files"], p["bytes"])
    for c in report.get("compacted", []):
        log.info("journal %s: compacted %s: %d snapshots, %d tick files removed, %d -> %d bytes", name,
                 c["period"], c["added"], c["removed"], c["bytes_before"], c["bytes_after"])
    for problem in report.get("problems", []):
        log.warning("journal %s: %s", name, problem)


def _close(stream: Any) -> None:
    try:
        stream.close()
    except (OSError, ValueError):
        pass


def child_main() -> int:
    """The child: passes until stdin closes."""
    from quota_pipeline.core.clock import SYSTEM
    from quota_pipeline.journal.listing import FooterCache
    from quota_pipeline.journal.maintenance import Options, run_pass
    from quota_pipeline.journal.storage import JournalBusy

    spec = json.loads(sys.stdin.readline() or "{}")
    clusters = [ClusterJournal.from_json(c) for c in spec.get("clusters", [])]
    os.nice(NICE)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    footers = {c.name: FooterCache() for c in clusters}
    options = Options(should_stop=stop.is_set)
    while not stop.is_set():
        for c in clusters:
            try:
                report = run_pass(c, SYSTEM.now(), options, footers[c.name]).to_json()
            except JournalBusy as exc:
                report = {"cluster": c.name, "problems": [f"skipped a pass: {exc}"]}
            except Exception as exc:  # noqa: BLE001 - one line in the job's log, the next pass tries again
                report = {"cluster": c.name, "problems": [f"pass failed: {type(exc).__name__}: {exc}"]}
            print(json.dumps(report), flush=True)
        stop.wait(spec.get("every", 60.0))
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
