"""When the streaming job restarts its failed query, and when it gives up.

A failed micro-batch is routine (a delivery failure fails the batch on purpose and Spark re-runs it from the
checkpoint), so the job restarts the query with backoff. A job whose query keeps failing while nothing is
published is another matter: restarting it inside the process forever hides it from a supervisor. Past
`quota.pipeline.run.give.up.after` without a published micro-batch, the next failure ends the job with GAVE_UP, so
that Kubernetes, systemd or the Spark operator restarts it (a fresh JVM, a fresh connection) or alerts. A job that
resumes from its checkpoint while the output cluster is down gives up after the same time (query.output_ready).
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import isodate

from quota_pipeline.core.clock import Clock

GAVE_UP = 4  # `run`'s exit code when it gives up; 1-3 are taken (errors, configuration, no Java)
FIRST_BACKOFF, LONGEST_BACKOFF = 2.0, 60.0


class GaveUp(Exception):
    """The job stops trying: its message is the one line that says why, and `run` exits with GAVE_UP."""


@dataclass
class Restarts:
    """The restart policy of one job: feed it publications and failures, it says how long to wait or to give up."""

    give_up_after: dt.timedelta  # PT0S: never give up
    clock: Clock
    backoff: float = FIRST_BACKOFF
    failures: int = 0  # since the last published micro-batch (or the start)
    last_progress: float = field(init=False)

    def __post_init__(self) -> None:
        self.last_progress = self.clock.monotonic()

    def published(self) -> None:
        """A micro-batch published its decisions: the query works, a later failure starts a new streak."""
        self.last_progress = self.clock.monotonic()
        self.failures = 0
        self.backoff = FIRST_BACKOFF

    @property
    def stuck_for(self) -> float:
        """Seconds since the last published micro-batch (or the start)."""
        return self.clock.monotonic() - self.last_progress

    def failed(self) -> float | None:
        """After a failure: the seconds to wait before the next restart, or None to give up."""
        self.failures += 1
        limit = self.give_up_after.total_seconds()
        if limit > 0 and self.stuck_for >= limit:
            return None
        wait, self.backoff = self.backoff, min(LONGEST_BACKOFF, self.backoff * 2)
        return wait

    def giving_up(self, error: str) -> str:
        """The one line logged when the job gives up."""
        return (f"giving up: no micro-batch published for {self.stuck_for:.0f} s across {self.failures} failed "
                f"run(s) of the query (quota.pipeline.run.give.up.after="
                f"{isodate.duration_isoformat(self.give_up_after)}); last failure: {error}; exiting with code {GAVE_UP} so that the "
                f"supervisor restarts the job from its checkpoint or alerts")

