"""One compaction step: a closed period's tick files (and its period file, if late ticks extend it) rewritten
as one time-sorted period file, then the tick files deleted. compaction.py says why every step is safe."""
from __future__ import annotations

import itertools
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core.model import epoch_micros
from quota_pipeline.journal import layout, rules
from quota_pipeline.journal.compaction import Compact, Step, _unlink_all, fsync_dir, no_step, record_length
from quota_pipeline.journal.layout import Sources
from quota_pipeline.journal.listing import TickFile, observed_at_of
from quota_pipeline.journal.period_file import Entry, PeriodWriter, representable, row_groups, table_of

CHUNK_FILES = 256  # tick files parsed per table (bounded memory whatever the cluster's size)
SORT_KEYS = [("observed_us", "ascending"), ("journal_file", "ascending")]


@dataclass(frozen=True)
class Rewritten:
    period: str
    added: int                            # snapshots moved from tick files into the period file
    kept: tuple[tuple[str, str], ...]     # (tick file, why) left as JSON for replay to report
    bytes_before: int
    bytes_after: int
    removed: int                          # tick files deleted


def _entries(cluster_dir: Path, ticks: list[tuple[int, TickFile]], kept: list, done: Callable[[], None]
             ) -> Iterator[Entry]:
    """Valid, representable snapshots of `ticks` (sorted by the time their first bytes show), in that order;
    the others are added to `kept`."""
    for key_us, t in ticks:
        try:
            record = json.loads((cluster_dir / t.rel).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            kept.append((t.rel, f"unreadable: {exc}"))
            done()
            continue
        problem = rules.first_problem(record)
        if problem is None and not representable(record):
            problem = "a value does not fit the period file's columns"
        entry = Entry(t.rel, t.tick, record) if problem is None else None
        if entry is not None and entry.key[0] != key_us:
            problem = "its first bytes name another observed_at than the record"
        if problem is not None:
            kept.append((t.rel, problem))
        else:
            yield entry  # type: ignore[misc]
        done()


def _chunks(entries: Iterator[Entry]) -> Iterator[list[Entry]]:
    chunk: list[Entry] = []
    for e in entries:
        chunk.append(e)
        if len(chunk) >= CHUNK_FILES:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _merged(old: Iterator[pa.Table], new: Iterator[Entry]) -> Iterator[tuple[pa.Table, int]]:
    """Old row groups (sorted) and new entries (sorted) as sorted tables with their count of new snapshots."""
    pending: list[Entry] = []
    source = iter(new)
    exhausted = False
    for rg in old:
        last = (rg.column("observed_us")[-1].as_py(), rg.column("journal_file")[-1].as_py())
        while not exhausted and (not pending or pending[-1].key <= last):
            nxt = next(source, None)
            exhausted = nxt is None
            if nxt is not None:
                pending.append(nxt)
        take = [e for e in pending if e.key <= last]
        pending = pending[len(take):]
        if take:
            rg = pa.concat_tables([rg, table_of(take)])
            rg = rg.take(pc.sort_indices(rg, SORT_KEYS))
        yield rg, len(take)
    for chunk in _chunks(iter([*pending, *source])):
        yield table_of(chunk), len(chunk)


def rewrite(cluster_dir: Path, action: Compact, step: Step = no_step,
            progress: Callable[[int], None] | None = None) -> Rewritten:
    """Write the period file beside a temporary name, fsync, rename, fsync the directory, then delete."""
    final = cluster_dir / action.target
    keyed, kept = [], []
    for t in action.new:
        observed = observed_at_of(cluster_dir / t.rel)
        if observed is None:
            kept.append((t.rel, "unreadable: no observed_at"))
        else:
            keyed.append((epoch_micros(observed), t))
    keyed.sort(key=lambda kt: (kt[0], kt[1].rel))
    done = (lambda: progress(1)) if progress else (lambda: None)
    entries = _entries(cluster_dir, keyed, kept, done)
    before = sum(t.size for t in (*action.new, *action.leftovers)) + (action.existing.size if action.existing else 0)
    first = next(entries, None)
    if first is None:  # nothing new to add: only leftovers (and kept files) to deal with
        removed = _unlink_all(cluster_dir, [t.rel for t in action.leftovers], step, "deleted")
        return Rewritten(str(action.period), 0, tuple(kept), before,
                         before - sum(t.size for t in action.leftovers), removed)
    record_length(cluster_dir, action.period.end - action.period.start)
    step("lengths-recorded")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"{layout.COMPACT_TMP_PREFIX}{uuid.uuid4().hex}.parquet"
    footer = action.existing.footer if action.existing else None
    writer = PeriodWriter(tmp, str(action.period), snapshots=footer.snapshots if footer else 0)
    added: list[str] = []
    try:
        old = row_groups(final) if footer else iter(())
        for table, n in _merged(old, _noted(itertools.chain([first], entries), added)):
            writer.write(table, n)
            step("writing")
        writer.close(Sources.merge([footer.sources, Sources.of(added)] if footer else [Sources.of(added)]))
    except BaseException:
        writer.abort()
        raise
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    step("written")
    os.replace(tmp, final)
    fsync_dir(final.parent)
    step("renamed")
    removed = _unlink_all(cluster_dir, [*added, *(t.rel for t in action.leftovers)], step, "deleted")
    return Rewritten(str(action.period), len(added), tuple(kept), before, final.stat().st_size, removed)


def _noted(entries: Iterator[Entry], added: list[str]) -> Iterator[Entry]:
    """The entries, each one's tick file noted in `added` as it is consumed."""
    for e in entries:
        added.append(e.journal_file)
        yield e
