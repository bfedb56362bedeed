"""A closed period's tick files (and its period file, if late ticks extend it) as one time-sorted period file,
built from local copies; journal/maintenance.py publishes it and deletes the tick files (compaction.py: why safely)."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core.model import epoch_micros
from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.journal.compaction import Compact, no_step
from quota_pipeline.journal.layout import Sources
from quota_pipeline.journal.listing import TickFile, observed_at
from quota_pipeline.journal.local_storage import LocalStorage
from quota_pipeline.journal.period_file import Entry, PeriodWriter, row_groups, rows_of
from quota_pipeline.journal.private import private_dirs
from quota_pipeline.journal.storage import Step

CHUNK_FILES = 64  # tick files parsed per table (bounded memory whatever the cluster's size)
SORT_KEYS = [("observed_us", "ascending"), ("journal_file", "ascending")]


@dataclass(frozen=True)
class Built:
    """What `build` put into the period file (tick files, by name) and what it left as JSON, with why."""

    added: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Rewritten:
    period: str
    added: int                            # snapshots moved from tick files into the period file
    kept: tuple[tuple[str, str], ...]     # (tick file, why) left as JSON for replay to report
    bytes_before: int
    bytes_after: int
    removed: int                          # tick files deleted


def _entry(cluster_dir: Path, key_us: int, t: TickFile, kept: list) -> Entry | None:
    """A tick file's snapshot when it is valid (rules.first_problem) and at the time its first bytes show;
    else None, and why in `kept`."""
    try:
        lines = [line for line in (cluster_dir / t.rel).read_bytes().splitlines() if line.strip()]
        if len(lines) != 1:  # replay reads a file line by line: compacting it whole would change what it reads
            kept.append((t.rel, "not one JSON line"))
            return None
        text = lines[0]
        record = json.loads(text)
    except FileNotFoundError:
        return None  # gone since the listing: a writer gave way to this tick's compacted snapshot
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the stack
        kept.append((t.rel, f"unreadable: {exc}"))
        return None
    problem = rules.first_problem(record)
    entry = Entry(t.rel, t.tick, record, text) if problem is None else None
    if entry is not None and entry.key[0] != key_us:
        problem, entry = "its first bytes name another observed_at than the record", None
    if problem is not None:
        kept.append((t.rel, problem))
    return entry


def _tables(cluster_dir: Path, keyed: list[tuple[int, TickFile]], kept: list, added: list[str],
            done: Callable[[], None]) -> Iterator[pa.Table]:
    """Time-sorted tables of up to CHUNK_FILES tick files each (keyed is sorted by time); the tick files they
    hold are noted in `added`, the others in `kept`."""
    for i in range(0, len(keyed), CHUNK_FILES):
        entries = []
        for key_us, t in keyed[i:i + CHUNK_FILES]:
            entry = _entry(cluster_dir, key_us, t, kept)
            entries.extend([entry] if entry else [])
            done()
        table, fits = rows_of(entries)
        fitting = {id(e) for e in fits}
        kept.extend((e.journal_file, "a value does not fit the period file's columns") for e in entries
                    if id(e) not in fitting)
        added.extend(e.journal_file for e in fits)
        if table.num_rows:
            yield table


def _before_or_at(table: pa.Table, last: tuple[int, str]) -> int:
    """How many leading rows of a time-sorted table sort at or before the key `last`."""
    us, files = table.column("observed_us"), table.column("journal_file")
    mask = pc.or_(pc.less(us, last[0]), pc.and_(pc.equal(us, last[0]), pc.less_equal(files, last[1])))
    return pc.sum(mask).as_py() or 0


def _merged(old: Iterator[pa.Table], new: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Old row groups and new tables (each sorted) as one sorted sequence of tables."""
    pending: pa.Table | None = None
    for rg in old:
        last = (rg.column("observed_us")[-1].as_py(), rg.column("journal_file")[-1].as_py())
        while pending is None or _before_or_at(pending, last) == pending.num_rows:
            nxt = next(new, None)
            if nxt is None:
                break
            pending = nxt if pending is None else pa.concat_tables([pending, nxt])
        n = 0 if pending is None else _before_or_at(pending, last)
        if n:
            rg = pa.concat_tables([rg, pending.slice(0, n)])  # type: ignore[union-attr]
            rg = rg.take(pc.sort_indices(rg, SORT_KEYS))
            pending = pending.slice(n)  # type: ignore[union-attr]
        yield rg
    if pending is not None and pending.num_rows:
        yield pending
    yield from new


def build(cluster_dir: Path, action: Compact, out: Path, step: Step = no_step,
          progress: Callable[[int], None] | None = None) -> Built:
    """The period file of `action` written to `out` (beside its name in `cluster_dir`, where the period's tick
    files and period file are): the period file as it was, with the new tick files merged in time order."""
    final, copies = cluster_dir / action.target, LocalStorage(str(cluster_dir))
    keyed, kept = [], []
    for t in action.new:
        observed = observed_at(copies, t.rel)
        if observed is None and (cluster_dir / t.rel).exists():
            kept.append((t.rel, "unreadable: no observed_at"))
        elif observed is None:
            continue  # gone since the listing
        else:
            keyed.append((epoch_micros(observed), t))
    keyed.sort(key=lambda kt: (kt[0], kt[1].rel))
    done = (lambda: progress(1)) if progress else (lambda: None)
    added: list[str] = []
    tables = _tables(cluster_dir, keyed, kept, added, done)
    first = next(tables, None)
    if first is None:  # nothing new to add: only leftovers (and kept files) to deal with
        return Built((), tuple(kept))
    private_dirs(out.parent)
    footer = action.existing.footer if action.existing else None
    writer = PeriodWriter(out, str(action.period))
    try:
        for table in _merged(row_groups(final) if footer else iter(()), itertools.chain([first], tables)):
            writer.write(table)
            step("writing")
        writer.close(Sources.merge([footer.sources, Sources.of(added)] if footer else [Sources.of(added)]),
                     (footer.snapshots if footer else 0) + len(added))
    except BaseException:
        writer.abort()
        raise
    return Built(tuple(added), tuple(kept))
