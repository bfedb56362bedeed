"""Replay's edge: one cluster's journal files read with pyarrow in time chunks and handed to core/cluster_pass.py.
Runs inside a Spark task (replay/job.py); no Spark here.

Memory is bounded by the chunk: the cluster's files are read by row group, a chunk is the rows of a time range
(every row of one snapshot falls in one chunk), and the pass's state carries the cache from chunk to chunk.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quota_pipeline.core.cluster_pass import (BAD_TIME, C_RANGE, C_TIME, COLUMNS, ORIGIN, TYPES, ClusterPass, Outcome,
                                              in_range, times)
from quota_pipeline.core.settings import Settings
from quota_pipeline.journal import rules

CHUNK_ROWS = 1_000_000


@dataclass(frozen=True)
class Task:
    """One cluster (None: the rows without a cluster id) and the files that hold its rows, in file order."""

    cluster_id: str | None
    files: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps({"cluster_id": self.cluster_id, "files": list(self.files)})

    @classmethod
    def from_json(cls, text: str) -> "Task":
        raw = json.loads(text)
        return cls(raw["cluster_id"], tuple(raw["files"]))


def read(path: str, groups: Sequence[int], columns: Sequence[str]) -> pa.Table:
    """Row groups of one file, the journal's columns (absent ones as nulls), with each row's origin."""
    f = pq.ParquetFile(path)
    names = set(f.schema_arrow.names)
    table = f.read_row_groups(list(groups), columns=[c for c in columns if c in names], use_threads=True)
    sizes = [f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)]
    begins = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    lines = np.concatenate([np.arange(begins[g], begins[g + 1], dtype=np.int64) + 1 for g in groups]) \
        if groups else np.zeros(0, np.int64)
    out = {}
    for c in columns:
        if c == "_file" and c in names:
            out[c] = pc.dictionary_encode(table.column(c).cast(pa.string()))  # staged: the JSONL file per row
        elif c in names:
            col = table.column(c)
            out[c] = col if c in ORIGIN or col.type == TYPES.get(c, col.type) else pc.cast(col, TYPES[c])
        elif c in TYPES:
            out[c] = pa.nulls(table.num_rows, TYPES[c])
    if "_file" not in names:
        out["_file"] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(table.num_rows, np.int32)), pa.array([path]))
        out["_offset"] = pa.array(np.zeros(table.num_rows, np.int64))
        out["_line"] = pa.array(lines)
    return pa.table(out)


def read_chunk(reads: list[tuple[str, list[int]]]) -> pa.Table:
    """The row groups of a chunk from each of its files, in one table."""
    parts = [read(path, groups, (*COLUMNS, *ORIGIN)) for path, groups in reads]
    return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]


class ClusterFiles:
    """Decisions of one cluster over its files, chunk by chunk, under the base settings and any sweep settings."""

    def __init__(self, task: Task, settings: Settings, sweep: Sequence[Settings] = (), chunk_rows: int = CHUNK_ROWS):
        self.task = task
        self.chunk_rows = chunk_rows
        self.cluster = ClusterPass(task.cluster_id, settings, sweep)

    @property
    def outcome(self) -> Outcome:
        return self.cluster.outcome

    def _plan(self) -> list[tuple[int, int, list[tuple[str, list[int]]]]]:
        """Chunks as (from µs, to µs exclusive, [(file, row groups)]); rows without a valid time are rejected here."""
        spans = []  # (min t, max t, rows, file, group)
        for path in self.task.files:
            f = pq.ParquetFile(path)
            for g in range(f.metadata.num_row_groups):
                table = read(path, [g], ("cluster_id", "observed_at", "observed_us", *ORIGIN))
                mine = self.cluster.mine(table)
                t = times(table)
                bad = mine & (t == BAD_TIME)
                far = mine & (t != BAD_TIME) & ((t < rules.EARLIEST_US) | (t >= rules.LATEST_US))
                if bad.any() or far.any():  # rare: read the group again with what a rejection shows
                    table = read(path, [g], (*COLUMNS, *ORIGIN))
                    for rows, code in ((bad, C_TIME), (far, C_RANGE)):
                        if rows.any():
                            self.cluster.reject_rows(table.filter(pa.array(rows)), code)
                good = mine & in_range(t)
                if good.any():
                    spans.append((int(t[good].min()), int(t[good].max()), int(good.sum()), path, g))
        spans.sort(key=lambda s: (s[1], s[0]))
        chunks, rows, lo = [], 0, None
        for i, (_, hi, n, _, _) in enumerate(spans):
            rows += n
            last = i == len(spans) - 1
            if (rows >= self.chunk_rows or last) and (lo is None or hi + 1 > lo):
                chunks.append((lo, hi + 1))
                lo, rows = hi + 1, 0
        plan = []
        for lo, hi in chunks:
            reads: dict[str, list[int]] = {}
            for smin, smax, _, path, g in spans:
                if smax >= (lo if lo is not None else smin) and smin < hi:
                    reads.setdefault(path, []).append(g)
            plan.append((lo if lo is not None else -2 ** 62, hi, list(reads.items())))
        return plan

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The cluster's records, chunk by chunk in time order; rejections gather in self.outcome."""
        plan = self._plan()
        if self.task.cluster_id is None:
            for lo, hi, reads in plan:
                for path, groups in reads:
                    table = read(path, groups, (*COLUMNS, *ORIGIN))
                    self.cluster.reject_rows(table.filter(pa.array(self.cluster.mine(table))), 1)
            return
        # The next chunk is read (pyarrow, without the GIL) while this one is decided.
        with ThreadPoolExecutor(1) as reader:
            pending = [reader.submit(read_chunk, reads) for _, _, reads in plan[:1] if reads]
            for i, (lo, hi, reads) in enumerate(plan):
                if not reads:
                    continue
                table = pending.pop(0).result()
                following = [r for _, _, r in plan[i + 1:] if r][:1]
                pending.extend(reader.submit(read_chunk, r) for r in following)
                yield from self._decide_range(table, lo, hi)

    def _decide_range(self, table: pa.Table, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
        """The rows of this cluster in [lo, hi) of the row groups read for that range."""
        t = times(table)
        keep = self.cluster.mine(table) & (t >= lo) & (t < hi) & in_range(t)  # other times: rejected by the plan
        if not keep.all():
            table, t = table.filter(pa.array(keep)), t[keep]
        if table.num_rows:
            batch = self.cluster.decide(table, t)
            if batch is not None:
                yield batch
