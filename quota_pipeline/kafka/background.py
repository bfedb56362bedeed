"""The lifecycle both topic followers share (the brokers' reader, the dashboard's): one daemon thread and a stop."""
from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


class Background:
    """`start()` runs `self._run` on a daemon thread (it must return soon after `self._stop` is set); `close()` sets
    the stop and joins. A follower must never keep a broker or a command from exiting, hence daemon."""

    thread_name = "quota-pipeline-follower"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> Any:
        if self._thread is not None:
            raise RuntimeError(f"{self.thread_name} already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def close_quietly(consumer: Any) -> None:
    """Close a follower's consumer on the way out; a failure to close must not hide why the follower ended."""
    if consumer is None:
        return
    try:
        consumer.close()
    except Exception:  # noqa: BLE001
        log.debug("closing the consumer failed", exc_info=True)
