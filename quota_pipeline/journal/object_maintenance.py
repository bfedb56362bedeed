"""Compaction and retention of one cluster's journal on an object store (s3://), with the local disk's guarantees.

An object store has no rename and no directory fsync; each guarantee is kept another way:
- A period file is PUT whole to its final key: an object is visible whole or not at all and durable once the
  PUT returns, so no temporary name is needed. Its footer lists the tick files it replaces, every reader skips a
  listed tick file, and tick files are deleted only after the PUT returned: a pass killed before the PUT leaves
  the period as it was, one killed after it leaves leftovers the next pass deletes. Nothing lost, nothing twice.
- The PUT is conditional: If-None-Match for a new period file, If-Match on the ETag the pass read when late ticks
  extend one. Of two passes racing on a period (the job's and `journal compact`) one PUT wins; the other is
  refused and deletes nothing. No lock is needed, and a killed process leaves none behind.
- The period file is built in a local staging directory by the local code (journal/rewrite.py), from the tick
  files and the period file as they were listed (a period file that changed since is left to the next pass).
- Retention deletes leftovers, then the period file, then the tick files, as on a local disk.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from quota_pipeline.core import names
from quota_pipeline.core.model import RecordError, parse_time
from quota_pipeline.journal import compaction, layout, object_journal, period_file
from quota_pipeline.journal.compaction import Compact, Plan, Prune, Step
from quota_pipeline.journal.layout import Period, Sources
from quota_pipeline.journal.listing import _OBSERVED_AT, PEEK_BYTES, Listing, OtherFile, PeriodFile, TickFile, usage
from quota_pipeline.journal.objstore import ObjectStore, ObjectStoreError, store_for
from quota_pipeline.journal.rewrite import Rewritten, rewrite

DOWNLOADS = 8          # parallel GETs while staging a period (small objects: latency, not bandwidth, bounds it)
DELETE_BATCH = 1000    # S3's DeleteObjects limit
_FOOTERS: dict[tuple[str, str], period_file.Footer] = {}  # by (key, ETag): a pass reads each new footer once


def observed_at(store: ObjectStore, key: str) -> dt.datetime | None:
    """A tick file's observed_at, from its first bytes (the whole object only when it is not there)."""
    try:
        got = store.get(key, (0, PEEK_BYTES - 1))
        m = None if got is None else _OBSERVED_AT.search(got.data)
        if m is None:
            got = store.get(key)
            return None if got is None else parse_time(json.loads(got.data).get("observed_at"))
        return parse_time(m.group(1).decode())
    except (ObjectStoreError, ValueError, AttributeError, RecordError, RecursionError):
        return None


def _footer(store: ObjectStore, key: str, etag: str) -> period_file.Footer:
    if (key, etag) not in _FOOTERS:
        if len(_FOOTERS) > 100_000:
            _FOOTERS.clear()
        with store.open_arrow(key) as fh:
            _FOOTERS[(key, etag)] = period_file.read_footer(fh)
    return _FOOTERS[(key, etag)]


def _tick_period(store: ObjectStore, name: str, day: str, tick: int, interval: dt.timedelta,
                 length: dt.timedelta) -> Period:
    known = layout.tick_period(day, tick, interval.total_seconds(), length)
    if known is not None:
        return known
    # The check interval changed since this tick was journaled: its own observed_at decides (else its day).
    seen = observed_at(store, f"{name}/{day}/{tick}.json")
    return Period.containing(seen or dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=layout.UTC), length)


def scan(store: ObjectStore, name: str, interval: dt.timedelta, length: dt.timedelta) -> tuple[Listing, dict]:
    """The cluster's objects as journal/listing.scan sees a directory, and each one's ETag by relative key."""
    ticks, periods, others, compacted, etags = [], [], [], [], {}
    for o in store.list(f"{name}/"):
        rel = o.rel[len(name) + 1:]
        day, _, file = rel.partition("/")
        if rel.endswith("/"):
            continue  # a "directory" marker some tools create
        etags[rel] = o.etag
        tick, period = layout.TICK_FILE.match(file), Period.from_file_name(file)
        if not layout.DAY_DIR.match(day) or "/" in file or not (tick or period):
            others.append(OtherFile(rel, o.size, o.mtime))
        elif tick:
            n = int(tick.group(1))
            ticks.append(TickFile(rel, n, o.size, _tick_period(store, name, day, n, interval, length)))
        else:
            try:
                footer = _footer(store, f"{name}/{rel}", o.etag)
                compacted.append(footer.sources)
                periods.append(PeriodFile(rel, period, o.size, footer))
            except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid, a ValueError
                periods.append(PeriodFile(rel, period, o.size, None, f"unreadable: {exc}"))
    ticks.sort(key=lambda t: (t.period, t.rel.split("/")[0], t.tick))
    periods.sort(key=lambda p: p.period)
    return Listing(tuple(ticks), tuple(periods), tuple(others), Sources.merge(compacted)), etags


def usage_of(store: ObjectStore, name: str, listing: Listing):
    return usage(Path(name), listing, lambda rel: observed_at(store, f"{name}/{rel}"))


def delete_all(store: ObjectStore, name: str, rels, step: Step, label: str) -> int:
    """Deletes the objects in batches; `label-first` after the first batch, `label` at the end (as on disk)."""
    rels = list(rels)
    for i in range(0, len(rels), DELETE_BATCH):
        store.delete_many([f"{name}/{r}" for r in rels[i:i + DELETE_BATCH]])
        if i == 0:
            step(f"{label}-first")
    step(label)
    return len(rels)


def prune(store: ObjectStore, name: str, action: Prune, step: Step) -> None:
    """Leftovers (invisible) first, then the period file, then the period's visible tick files."""
    delete_all(store, name, [t.rel for t in action.leftovers], step, "prune-leftovers")
    delete_all(store, name, [p.rel for p in action.period_files], step, "prune-period-files")
    delete_all(store, name, [t.rel for t in action.ticks], step, "prune-ticks")


def _stage(store: ObjectStore, name: str, action: Compact, etags: dict, local: Path) -> bool:
    """The period's tick files and period file downloaded under `local`; False when the period file changed
    since the listing (another pass extended or deleted it: this pass leaves the period alone)."""
    with ThreadPoolExecutor(DOWNLOADS) as pool:
        list(pool.map(lambda t: store.download(f"{name}/{t.rel}", local / t.rel), action.new))
    if action.existing is None:
        return True
    etag = store.download(f"{name}/{action.existing.rel}", local / action.existing.rel)
    return etag is not None and etag == etags.get(action.existing.rel)


def compact(store: ObjectStore, name: str, action: Compact, etags: dict, step: Step,
            progress=None) -> Rewritten | None:
    """One closed period compacted; None when another pass changed it first (nothing written or deleted)."""
    with tempfile.TemporaryDirectory(prefix="quota-pipeline-compact-") as tmp:
        local = Path(tmp)
        if not _stage(store, name, action, etags, local):
            return None
        done = rewrite(local, action, lambda s: step(f"staged-{s}"), progress)
        if done.added == 0:  # only leftovers to delete (and files kept as JSON)
            removed = delete_all(store, name, [t.rel for t in action.leftovers], step, "deleted")
            return dataclasses.replace(done, removed=removed)
        final = local / action.target
        sources = period_file.read_footer(final).sources
        object_journal.record_length(store, name, action.period.end - action.period.start)
        step("lengths-recorded")
        existing = etags.get(action.existing.rel) if action.existing else None
        if store.put(f"{name}/{action.target}", final.read_bytes(), if_none_match=existing is None,
                     if_match=existing) is None:
            return None
        step("uploaded")
        gone = [r for r in (*(t.rel for t in action.new), *(t.rel for t in action.leftovers)) if r in sources]
        return dataclasses.replace(done, removed=delete_all(store, name, gone, step, "deleted"))


def run_pass(cj, now: dt.datetime, options, report):
    """Retention, then compaction, of one cluster's journal on an object store (maintenance.run_pass's work)."""
    names.checked(cj.name, "the cluster's journal name (quota.pipeline.cluster.name or the config's file name)")
    store = store_for(cj.root)
    listing, etags = scan(store, cj.name, cj.interval, cj.period)
    plan = compaction.plan_for(listing, now, cj.interval, cj.period, cj.retention, None, options.prune,
                               options.compact)
    report.plan = plan
    report.problems.extend(plan.problems)
    if options.on_plan:
        options.on_plan(plan)
    if not options.dry_run:
        _execute(store, cj.name, plan, etags, options, report)
        listing, _ = scan(store, cj.name, cj.interval, cj.period)
    report.usage = usage_of(store, cj.name, listing)
    return report


def _execute(store: ObjectStore, name: str, plan: Plan, etags: dict, options, report) -> None:
    import pyarrow as pa

    delete_all(store, name, plan.stale, options.step, "stale")
    for action in plan.prune:
        if options.should_stop():
            return
        prune(store, name, action, options.step)
        report.pruned.append(action)
    for c in plan.compact:
        if options.should_stop():
            return
        where = f"{store.uri.rstrip('/')}/{name}/{c.target}"
        try:
            done = compact(store, name, c, etags, options.step, options.progress)
        except (OSError, ValueError, pa.ArrowException, ObjectStoreError) as exc:
            report.problems.append(f"{where}: not compacted: {exc}")
            continue
        if done is None:
            report.problems.append(f"{where}: changed by another pass meanwhile; the next pass compacts it")
            continue
        report.rewritten.append(done)
        report.problems.extend(f"{name}/{rel}: left as JSON: {why}" for rel, why in done.kept)
