"""Journal maintenance: one pass over one cluster (retention, then compaction), as the job and the command run it.

The streaming job runs passes in a child process (journal/background.py), so that parsing an hour of JSON
never holds the driver's interpreter lock or competes with a micro-batch at the same priority.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import isodate

from quota_pipeline.core import config as cfg
from quota_pipeline.core import names
from quota_pipeline.journal import compaction
from quota_pipeline.journal.compaction import Plan, Prune, Step, no_step
from quota_pipeline.journal.listing import FooterCache, Usage, scan, usage
from quota_pipeline.journal.private import FILE_MODE, private_dirs
from quota_pipeline.journal.rewrite import Rewritten, rewrite


class JournalBusy(Exception):
    """Another process holds the cluster's journal lock (a pass of the job, or the command)."""


@dataclass(frozen=True)
class ClusterJournal:
    """One cluster's journal and the settings its maintenance follows."""

    root: str
    name: str
    interval: dt.timedelta
    period: dt.timedelta
    retention: dt.timedelta

    @classmethod
    def of(cls, conf: cfg.Config, name: str) -> ClusterJournal:
        return cls(conf.effective_journal_path, name, conf.check_interval, conf.journal_period,
                   conf.journal_retention)

    @property
    def is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")

    @property
    def is_object_store(self) -> bool:
        return self.root.startswith("s3://")

    @property
    def is_maintained(self) -> bool:
        """Compaction and retention run on local paths and s3:// (journal/object_maintenance.py)."""
        return self.is_local or self.is_object_store

    @property
    def location(self) -> str:
        """The cluster's directory or object prefix, as a user would name it."""
        return f"{self.root.rstrip('/')}/{self.name}" if self.is_object_store else str(self.dir)

    @property
    def dir(self) -> Path:
        return Path(self.root.removeprefix("file://")) / self.name

    def checked_dir(self) -> Path:
        """The cluster's directory, its name safe and the directory inside the journal root (names.UnsafePath)."""
        names.checked(self.name, "the cluster's journal name (quota.pipeline.cluster.name or the config's file name)")
        return names.inside(Path(self.root.removeprefix("file://")), self.dir)

    def to_json(self) -> dict:
        return {"root": self.root, "name": self.name, "interval": self.interval.total_seconds(),
                "period": self.period.total_seconds(), "retention": self.retention.total_seconds()}

    @classmethod
    def from_json(cls, d: dict) -> ClusterJournal:
        return cls(d["root"], d["name"], *(dt.timedelta(seconds=d[k]) for k in ("interval", "period", "retention")))


def period_problem(conf: cfg.Config) -> str | None:
    """Why `conf`'s journal period cannot cut the journal into periods, as one line naming the property."""
    period = conf.journal_period
    if period < dt.timedelta(seconds=1) or period.microseconds:
        return (f"error: {conf.path}: {cfg.JOURNAL_PERIOD} must be a whole number of seconds, at least PT1S "
                f"(got {isodate.duration_isoformat(period)})")
    return None


@contextmanager
def locked(cluster_dir: Path, wait_s: float = 0.0) -> Iterator[None]:
    """The cluster's maintenance lock (flock: released by the kernel if the holder dies, kill -9 included)."""
    private_dirs(cluster_dir)
    fd = os.open(cluster_dir / "_lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, FILE_MODE)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise JournalBusy(f"another process is maintaining {cluster_dir} (the streaming job?); "
                                      f"try again in a minute") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass
class PassReport:
    cluster: str
    plan: Plan | None = None
    pruned: list[Prune] = field(default_factory=list)
    rewritten: list[Rewritten] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    usage: Usage | None = None

    def to_json(self) -> dict:
        return {"cluster": self.cluster, "usage": self.usage.to_json() if self.usage else None,
                "pruned": [{"period": str(p.period), "files": p.files, "bytes": p.bytes} for p in self.pruned],
                "compacted": [{"period": r.period, "added": r.added, "removed": r.removed,
                               "bytes_before": r.bytes_before, "bytes_after": r.bytes_after,
                               "kept": [list(k) for k in r.kept]} for r in self.rewritten],
                "problems": self.problems}


@dataclass
class Options:
    """What a pass does: both halves by default (the job), one of them for `journal compact|prune`."""

    compact: bool = True
    prune: bool = True
    dry_run: bool = False
    wait_s: float = 0.0
    step: Step = no_step
    on_plan: Callable[[Plan], None] | None = None
    progress: Callable[[int], None] | None = None
    should_stop: Callable[[], bool] = lambda: False


def run_pass(cj: ClusterJournal, now: dt.datetime, options: Options | None = None,
             footers: FooterCache | None = None, wall_seconds: float | None = None) -> PassReport:
    """Retention, then compaction, of one cluster's journal at `now`; usage as it is afterwards."""
    options = options or Options()
    report = PassReport(cj.name)
    if cj.is_object_store:
        from quota_pipeline.journal import object_maintenance

        return object_maintenance.run_pass(cj, now, options, report)
    footers = footers or FooterCache()
    cj.checked_dir()  # nothing outside the journal root is written or deleted
    if not cj.dir.is_dir():
        report.usage = usage(cj.dir, scan(cj.dir, cj.interval, cj.period, footers))
        return report
    # A dry run only reads: no lock file either (it may race a pass of the job, and says what it would do).
    with nullcontext() if options.dry_run else locked(cj.dir, options.wait_s):
        listing = scan(cj.dir, cj.interval, cj.period, footers)
        # Temporary files are aged by their mtime, which the file system's clock wrote: compared with it.
        plan = compaction.plan_for(listing, now, cj.interval, cj.period, cj.retention,
                                   time.time() if wall_seconds is None else wall_seconds, options.prune, options.compact)
        report.plan = plan
        report.problems.extend(plan.problems)
        if options.on_plan:
            options.on_plan(plan)
        if not options.dry_run:
            _execute(cj.dir, plan, options, report)
        report.usage = usage(cj.dir, scan(cj.dir, cj.interval, cj.period, footers))
    return report


def _execute(cluster_dir: Path, plan: Plan, options: Options, report: PassReport) -> None:
    import pyarrow as pa

    compaction.remove_stale(cluster_dir, plan.stale)
    for action in plan.prune:
        if options.should_stop():
            return
        compaction.prune(cluster_dir, action, options.step)
        report.pruned.append(action)
    for c in plan.compact:
        if options.should_stop():
            return
        try:
            done = rewrite(cluster_dir, c, options.step, options.progress)
        except (OSError, ValueError, pa.ArrowException) as exc:
            report.problems.append(f"{cluster_dir / c.target}: not compacted: {exc}")
            continue
        report.rewritten.append(done)
        report.problems.extend(f"{cluster_dir / rel}: left as JSON: {why}" for rel, why in done.kept)


def usage_of(cj: ClusterJournal) -> Usage:
    """What `journal stats` shows for one cluster, wherever its journal is."""
    if cj.is_object_store:
        from quota_pipeline.journal import object_maintenance
        from quota_pipeline.journal.objstore import store_for

        store = store_for(cj.root)
        listing, _ = object_maintenance.scan(store, cj.name, cj.interval, cj.period)
        return object_maintenance.usage_of(store, cj.name, listing)
    return usage(cj.dir, scan(cj.dir, cj.interval, cj.period))
