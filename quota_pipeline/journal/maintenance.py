"""Journal maintenance: one pass over one cluster (retention, then compaction) on any storage, as the job and the
command run it; journal/compaction.py says why each step is safe.

The streaming job runs passes in a child process (journal/background.py), so that parsing an hour of JSON
never holds the driver's interpreter lock or competes with a micro-batch at the same priority.
"""
from __future__ import annotations

import datetime as dt
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import isodate
import pyarrow as pa

from quota_pipeline.core import config as cfg
from quota_pipeline.journal import compaction, layout
from quota_pipeline.journal.compaction import Compact, Plan, Prune, no_step
from quota_pipeline.journal.listing import FooterCache, Usage, scan, usage
from quota_pipeline.journal.objstore import ObjectStoreError
from quota_pipeline.journal.rewrite import Rewritten, build
from quota_pipeline.journal.storage import JournalConflict, Step, Storage
from quota_pipeline.journal.store import storage_for

CONFLICT_TRIES = 5  # _periods changed under a swap (another pass added a length): read it again


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
    def storage(self) -> Storage:
        """The journal's storage; UnsupportedJournalPath (one line) for a path it cannot be kept on."""
        return storage_for(self.root)

    @property
    def location(self) -> str:
        """The cluster's directory or object prefix, as a user would name it."""
        return self.storage.where(self.name)

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
    options, footers, storage, report = options or Options(), footers or FooterCache(), cj.storage, PassReport(cj.name)
    storage.checked(cj.name)  # nothing outside the journal root is written or deleted
    # A dry run only reads: no lock file either (it may race a pass of the job, and says what it would do).
    with nullcontext(True) if options.dry_run else storage.lock(cj.name, options.wait_s) as there:
        if there:
            listing, versions = scan(storage, cj.name, cj.interval, cj.period, footers)
            # Temporary files are aged by their mtime, which the storage's clock wrote: compared with it.
            plan = compaction.plan_for(listing, now, cj.interval, cj.period, cj.retention,
                                       time.time() if wall_seconds is None else wall_seconds, options.prune,
                                       options.compact)
            report.plan = plan
            report.problems.extend(plan.problems)
            if options.on_plan:
                options.on_plan(plan)
            if not options.dry_run:
                _execute(storage, cj.name, plan, versions, options, report)
        report.usage = usage_of(cj, footers)
    return report


def _execute(storage: Storage, name: str, plan: Plan, versions: dict[str, str], options: Options,
             report: PassReport) -> None:
    delete_all(storage, name, plan.stale, options.step, "stale")
    for action in plan.prune:
        if options.should_stop():
            return
        prune(storage, name, action, options.step)
        report.pruned.append(action)
    for c in plan.compact:
        if options.should_stop():
            return
        where = storage.where(f"{name}/{c.target}")
        try:
            done = compact(storage, name, c, versions, options.step, options.progress)
        except (OSError, ValueError, pa.ArrowException, ObjectStoreError) as exc:
            report.problems.append(f"{where}: not compacted: {exc}")
            continue
        if done is None:
            report.problems.append(f"{where}: changed by another pass meanwhile; the next pass compacts it")
            continue
        report.rewritten.append(done)
        report.problems.extend(f"{storage.where(f'{name}/{rel}')}: left as JSON: {why}" for rel, why in done.kept)


def delete_all(storage: Storage, name: str, rels, step: Step, label: str) -> int:
    """Deletes the cluster's files in the storage's batches: step `label-first` after the first, `label` at the end."""
    rels, removed = [f"{name}/{r}" for r in rels], 0
    for i in range(0, len(rels), storage.delete_batch):
        removed += storage.delete(rels[i:i + storage.delete_batch])
        if i == 0:
            step(f"{label}-first")
    step(label)
    return removed


def prune(storage: Storage, name: str, action: Prune, step: Step) -> None:
    """Leftovers (invisible) first, then the period file, then the period's visible tick files."""
    delete_all(storage, name, [t.rel for t in action.leftovers], step, "prune-leftovers")
    delete_all(storage, name, [p.rel for p in action.period_files], step, "prune-period-files")
    delete_all(storage, name, [t.rel for t in action.ticks], step, "prune-ticks")
    storage.remove_empty_dirs([f"{name}/{f.rel}" for f in (*action.leftovers, *action.period_files, *action.ticks)])


def compact(storage: Storage, name: str, action: Compact, versions: dict[str, str], step: Step,
            progress: Callable[[int], None] | None = None) -> Rewritten | None:
    """One closed period compacted: its period file built from local copies, published under the version listed,
    then the tick files it holds deleted; None when another pass changed the period file first (nothing written
    or deleted)."""
    existing = {f"{name}/{action.existing.rel}": versions[action.existing.rel]} if action.existing else {}
    before = sum(t.size for t in (*action.new, *action.leftovers)) + (action.existing.size if action.existing else 0)
    with storage.staged([f"{name}/{t.rel}" for t in action.new], existing) as staged:
        if staged is None:
            return None
        built_at = staged / name / Path(action.target).parent / f"{layout.COMPACT_TMP_PREFIX}{uuid.uuid4().hex}.parquet"
        built = build(staged / name, action, built_at, step, progress)
        after = before - sum(t.size for t in action.leftovers)
        if built.added:
            after = built_at.stat().st_size
            record_length(storage, name, action.period.end - action.period.start)
            step("lengths-recorded")
            if not storage.put_file(f"{name}/{action.target}", built_at, existing.get(f"{name}/{action.target}"),
                                    step):
                return None
        removed = delete_all(storage, name, [*built.added, *(t.rel for t in action.leftovers)], step, "deleted")
    return Rewritten(str(action.period), len(built.added), built.kept, before, after, removed)


def record_length(storage: Storage, name: str, length: dt.timedelta) -> None:
    """Adds `length` to the cluster's _periods (Journal.read looks a compacted tick up under every length used)
    before the first period file of that length exists: read, then swapped in under the version read."""
    rel, text = f"{name}/{layout.PERIODS_FILE}", isodate.duration_isoformat(length)
    for _ in range(CONFLICT_TRIES):
        got = storage.get(rel)
        known = got[0].decode().split() if got else []
        if text in known:
            return
        if storage.swap(rel, ("\n".join([*known, text]) + "\n").encode(), got[1] if got else None):
            return
    raise JournalConflict(f"{storage.where(rel)}: kept changing while a pass added {text} to it")


def usage_of(cj: ClusterJournal, footers: FooterCache | None = None) -> Usage:
    """What `journal stats` shows for one cluster, wherever its journal is."""
    listing, _ = scan(cj.storage, cj.name, cj.interval, cj.period, footers)
    return usage(cj.storage, cj.name, listing)
