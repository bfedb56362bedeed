"""remedy's current plan for the cluster a view's configuration observes, re-read in the background: what `tail`
shows under a stopped or nearly stopped cluster (a dir at or past its soft limit is one that throttles)."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from rich.console import Group, RenderableType
from rich.text import Text

from quota_pipeline.core.config import Config
from quota_pipeline.core.display import visible
from quota_pipeline.remedy import planner
from quota_pipeline.remedy.gather import read_view
from quota_pipeline.remedy.need import Margin
from quota_pipeline.remedy.plan import MovePlan
from quota_pipeline.remedy.render import dirs_table, moves_table

log = logging.getLogger(__name__)

DEFAULT_EVERY = 30.0  # seconds between two readings: DescribeLogDirs on every broker each time
MARGIN = Margin("ratio", 0.02)  # remedy's defaults
RATE = 10 * 2 ** 20


@dataclass(frozen=True)
class Seen:
    plan: MovePlan | None
    at: float  # monotonic
    error: str | None = None


class PlanWatcher:
    """Reads the cluster every `every` seconds and keeps the plan `remedy` would print (with its default margin and
    throttle, growth not sampled); `admin_factory` opens the admin port (kafka.remedy_admin.RemedyAdmin)."""

    def __init__(self, conf: Config, admin_factory: Callable[[], Any], every: float = DEFAULT_EVERY) -> None:
        self.conf, self.admin_factory, self.every = conf, admin_factory, every
        self.seen: Seen | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="remedy-plan", daemon=True)

    def start(self) -> "PlanWatcher":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def read_once(self, admin: Any) -> Seen:
        try:
            view = read_view(admin, self.conf)
            return Seen(planner.plan(view, self.conf.limits, MARGIN, RATE, self.conf.eta_horizon.total_seconds()),
                        time.monotonic())
        except Exception as exc:  # a view keeps running whatever the cluster answers; it says why instead
            log.debug("reading the plan failed", exc_info=True)
            return Seen(None, time.monotonic(), f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        with self.admin_factory() as admin:
            while not self._stop.is_set():
                self.seen = self.read_once(admin)
                self._stop.wait(self.every)


def as_json(seen: Seen | None, now: float | None = None) -> dict[str, Any]:
    """The web page's form: the plan (null before the first reading or when it failed), its age, the failure."""
    if seen is None:
        return {"plan": None, "age_seconds": None, "error": None}
    return {"plan": None if seen.plan is None else seen.plan.to_json(),
            "age_seconds": (now or time.monotonic()) - seen.at, "error": seen.error}


def render(seen: Seen | None, now: float | None = None) -> RenderableType:
    """The plan under the view: only when some dir needs one (a stopped or nearly stopped cluster)."""
    if seen is None:
        return Text("remedy's plan: reading the cluster ...", "dim")
    age = f"{(now or time.monotonic()) - seen.at:.0f} s ago"
    if seen.error is not None:
        return Text(visible(f"remedy's plan: the cluster could not be read ({seen.error}), {age}"), "red")
    plan = seen.plan
    if plan is None or not plan.dirs:
        return Text(f"remedy's plan: every log dir is above its limit ({age})", "dim")
    parts: list[RenderableType] = [Text(visible(f"remedy's plan for {plan.cluster} ({age}; make it with "
                                                "`quota-pipeline remedy CONFIG --execute`)"), "bold"),
                                   dirs_table(plan)]
    if plan.moves:
        parts.append(moves_table(plan))
    return Group(*parts)
