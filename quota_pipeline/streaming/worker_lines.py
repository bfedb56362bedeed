"""The job's own lines from Spark's Python workers (a failed observation, a journal file it did not write) back on the
driver's terminal: a worker writes them marked to its stderr, which Spark relays to the JVM's output, `run`'s log
file; the driver follows that file and logs each marked line as its own."""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

ENV = "QUOTA_PIPELINE_WORKER_LINES"  # set by `run` for the JVM it starts, and so for its Python workers
MARK = "quota-pipeline worker line: "
_installed = False


def install() -> None:
    """In a Python worker of a job whose driver follows the log file: mark the job's warnings on stderr."""
    global _installed
    if _installed or not os.environ.get(ENV):
        return
    _installed = True
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(MARK + "%(levelname)s %(message)s"))
    logging.getLogger("quota_pipeline").addHandler(handler)


def parse(line: str) -> tuple[int, str] | None:
    """A marked line's level and message (None: a line of Spark's, or not whole)."""
    if not line.startswith(MARK) or not line.endswith("\n"):
        return None
    level, _, message = line[len(MARK):].rstrip("\n").partition(" ")
    number = logging.getLevelName(level)
    return (number, message) if isinstance(number, int) else None


def follow(path: Path, log: logging.Logger, poll_s: float = 0.5) -> threading.Thread:
    """Log every marked line appended to `path` from now on, in a daemon thread (it ends with the process)."""
    start = path.stat().st_size if path.exists() else 0

    def run() -> None:
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(start)
            pending = ""
            while True:
                chunk = f.readline()
                if not chunk:
                    time.sleep(poll_s)
                    continue
                pending += chunk
                if not pending.endswith("\n"):
                    continue
                found = parse(pending)
                pending = ""
                if found:
                    log.log(found[0], "%s", found[1])

    thread = threading.Thread(target=run, name="worker-lines", daemon=True)
    thread.start()
    return thread
