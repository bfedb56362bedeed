"""The job's start, from its process's start to its first published decision: measured, kept beside the checkpoint
(start.json), and held against the readers' validity, which must cover twice that time."""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from quota_pipeline.core.display import first_line, visible
from quota_pipeline.streaming import checkpoint_files

NAME = "start.json"
MARGIN = 2  # the validity covers this many starts: a restart slower than the last one still lands inside it
LONGEST_S = 86400.0  # a start longer than a day is no measurement of this job's
FILE_BYTES = 4096  # what is read of the file: the job writes a hundred bytes
IMPORTED = time.time()  # the fallback for a process start where /proc does not say it


@dataclass(frozen=True)
class Kept:
    """The last start's duration and when it ended (its first decision), as start.json keeps them."""
    seconds: float
    at: float


def process_started() -> float:
    """This process's start (wall time) from the kernel's record of it, to 10 ms; where there is none (not Linux),
    when this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return IMPORTED


def write(checkpoint_path: str, kept: Kept) -> None:
    checkpoint_files.write_whole(checkpoint_path, NAME, json.dumps(
        {"start_seconds": round(kept.seconds, 3), "first_decision_at": round(kept.at, 3)}).encode())


def read(checkpoint_path: str) -> tuple[Kept | None, str | None]:
    """The kept start, or None with the reason it is refused in one line (None, None: there is none). Anyone with
    access to the checkpoint may have written the file: it is only believed when it holds what `write` writes."""
    where = checkpoint_files.join(checkpoint_path, NAME)
    try:
        text = checkpoint_files.read_text(checkpoint_path, NAME, limit=FILE_BYTES + 1)
    except Exception as exc:  # noqa: BLE001 - an unreadable file (a directory, no permission, the store down)
        return None, f"refused {visible(where)}: cannot read it ({first_line(exc)}); the next start writes it again"
    if text is None:
        return None, None
    problem = None
    if len(text) > FILE_BYTES:
        problem = f"longer than {FILE_BYTES} bytes"
    else:
        try:
            raw = json.loads(text)
        except ValueError:
            raw = None
        values = [raw.get(k) for k in ("start_seconds", "first_decision_at")] if isinstance(raw, dict) else []
        if not (len(values) == 2 and all(_number(v) for v in values)):
            problem = "not the start_seconds and first_decision_at numbers the job writes"
        elif not 0 < values[0] <= LONGEST_S or values[1] <= 0:
            problem = f"start_seconds {values[0]!r} is not in (0, {LONGEST_S:.0f}] or first_decision_at not positive"
        else:
            return Kept(float(values[0]), float(values[1])), None
    return None, f"refused {visible(where)}: {problem}; the next start writes it again (or delete it)"


def validity_warning(validity_s: float, kept: Kept, where: str) -> str | None:
    """The one comparison: a validity shorter than MARGIN starts is a release (the fallback) while a restart lasts."""
    if validity_s >= MARGIN * kept.seconds:
        return None
    needed = math.ceil(MARGIN * kept.seconds)
    return (f"the readers' validity ({validity_s:g} s) does not cover {MARGIN} x this job's last start "
            f"({kept.seconds:.1f} s from process start to first published decision, {visible(where)}): a restart "
            f"would outlast the last decision and every broker would apply its fallback meanwhile; set "
            f"throttle.factor.validity.duration to PT{needed}S or more (and run `quota-pipeline prepare` where the "
            f"job runs, if it has not)")


def warnings(configs: list[Any], kept: Kept | None, checkpoint_path: str) -> list[str]:
    """validity_warning for each config whose validity does not cover the kept start (one line per validity)."""
    if kept is None:
        return []
    where = checkpoint_files.join(checkpoint_path, NAME)
    lines = {validity_warning(c.validity.total_seconds(), kept, where) for c in configs}
    return sorted(line for line in lines if line)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class StartClock:
    """Measures this start once, at its first published decision: the gauge, start.json and one log line."""
    checkpoint_path: str
    gauge: Any  # Metrics.start_seconds
    log: Any
    on_first: Any = None  # called once after the first decision (run: the class archive in the background)
    started: float | None = None  # the process's start (default: from the kernel)
    done: bool = False

    def __post_init__(self) -> None:
        self.started = process_started() if self.started is None else self.started

    def published(self, jvm_started: float | None = None) -> None:
        """The first call measures; later calls do nothing. `jvm_started`: a JVM that was up before this process
        (spark-submit's driver) starts the clock at its own start."""
        if self.done:
            return
        self.done = True
        assert self.started is not None
        began = min(self.started, jvm_started) if jvm_started else self.started
        kept = Kept(time.time() - began, time.time())
        self.gauge.set(kept.seconds)
        self.log.info("first decision published %.1f s after the job's process started", kept.seconds)
        try:
            write(self.checkpoint_path, kept)
        except Exception as exc:  # noqa: BLE001 - only the next start's warning depends on it
            self.log.warning("could not keep the start time in %s: %s", self.checkpoint_path, first_line(exc))
        if self.on_first is not None:
            self.on_first()


def at_start(configs: list[Any], checkpoint_path: str, gauge: Any) -> list[str]:
    """What a start warns of from the start kept by the last one (the gauge shows it until this start has
    published): a refused file, or each validity that does not cover it."""
    kept, refused = read(checkpoint_path)
    if kept is not None:
        gauge.set(kept.seconds)
    return ([refused] if refused else []) + warnings(configs, kept, checkpoint_path)


def jvm_started(frame: Any) -> float | None:
    """When spark-submit's JVM started, for a driver it started (None for a JVM this process started after itself);
    `frame`: a micro-batch's DataFrame, whose session reaches the JVM."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    try:
        jvm = frame.sparkSession.sparkContext._jvm
        return jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getStartTime() / 1000
    except Exception:  # noqa: BLE001 - the process's own start is then the measure
        return None
