"""Replay's edge: one cluster's journal files read with pyarrow in time chunks and handed to core/cluster_pass.py.
Runs inside a Spark task (replay/job.py); no Spark here.

Memory is bounded by the chunk: the cluster's files are read by row group, a chunk is the rows of a time range
(every row of one snapshot falls in one chunk), and the pass's state carries the cache from chunk to chunk. Three
chunks are in memory at once: one read, one prepared, one decided.
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

from quota_pipeline.core.columns import COLUMNS, TYPES
from quota_pipeline.core.compiled.frame import BAD_TIME, Prepared, in_range, times
from quota_pipeline.core.compiled.rows import take_runs
from quota_pipeline.core.compiled.rule_codes import C_RANGE, C_TIME
from quota_pipeline.replay.tally import ORIGIN, Outcome, prepare
from quota_pipeline.replay.tally import ReplayPass as ClusterPass
from quota_pipeline.core.settings import Settings
from quota_pipeline.core import snapshot_rules as rules

# A chunk ends at the end of the row group that brings it to this many rows: three chunks are in memory at once (one
# read, one prepared, one decided), and smaller chunks cost no speed down to a row group each.
CHUNK_ROWS = 500_000


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


# Topics as read: dictionary-encoded names, as the Parquet pages hold them. Decoding every name of every row cost
# 5.5 s per 3M rows of 20 topics, 1.1 s this way; only the rows a stop or the carried state needs are decoded.
TOPICS_READ = pa.list_(pa.dictionary(pa.int32(), pa.string()))


# Strings that repeat row after row (a cluster's id, a snapshot's time and status, a dir's name, an error) read as
# the Parquet pages hold them, dictionary-encoded: materializing every row's string took 2 of the 3.5 s a 10M-row
# journal took to read; the pass compares, groups and takes them as they are.
DICTIONARY = ("cluster_id", "observed_at", "status", "log_dir", "error")


def read(path: str, groups: Sequence[int], columns: Sequence[str]) -> pa.Table:
    """Row groups of one file, the journal's columns asked for (absent ones as nulls; ORIGIN's: each row's
    origin)."""
    footer = pq.ParquetFile(path)  # its schema says which columns to read as dictionaries; the footer is read once
    schema = footer.schema_arrow
    names = set(schema.names)
    encoded = [c for c in DICTIONARY if c in columns and c in names and pa.types.is_string(schema.field(c).type)]
    if "topics" in columns and "topics" in names and pa.types.is_list(schema.field("topics").type) and \
            pa.types.is_string(schema.field("topics").type.value_type):
        encoded.append("topics.list.element")
    f = pq.ParquetFile(path, metadata=footer.metadata, read_dictionary=encoded or None)
    wanted = [c for c in columns if c in names]
    # A nested column read as dictionary comes one row group at a time.
    table = pa.concat_tables([f.read_row_groups([g], columns=wanted, use_threads=True) for g in groups]) \
        if len(groups) != 1 else f.read_row_groups(list(groups), columns=wanted, use_threads=True)
    out = {}
    for c in columns:
        if c == "_file" and c in names:
            out[c] = pc.dictionary_encode(table.column(c).cast(pa.string()))  # staged: the JSONL file per row
        elif c in names:
            col = table.column(c)
            want = TOPICS_READ if c == "topics" else TYPES.get(c, col.type)
            if pa.types.is_dictionary(col.type) and col.type.value_type == want:
                want = col.type
            out[c] = col if c in ORIGIN or col.type == want else pc.cast(col, want)
        elif c in TYPES:
            out[c] = pa.nulls(table.num_rows, TOPICS_READ if c == "topics" else TYPES[c])
    if "_file" in columns and "_file" not in names:  # a Parquet journal: a row's origin is its row number
        sizes = [f.metadata.row_group(g).num_rows for g in range(f.metadata.num_row_groups)]
        begins = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        lines = np.concatenate([np.arange(begins[g] + 1, begins[g + 1] + 1, dtype=np.int64) for g in groups]) \
            if groups else np.zeros(0, np.int64)
        # Every index 0, into a one-word dictionary: nothing to check (from_arrays checks each index otherwise).
        out["_file"] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(table.num_rows, np.int32)), pa.array([path]),
                                                      safe=False)
        out["_offset"] = pa.array(np.zeros(table.num_rows, np.int64))
        out["_line"] = pa.array(lines)
    return pa.table(out)


SAMPLE = 256  # about as many times kept per row group by the plan, to estimate its rows in each chunk


@dataclass
class Span:
    """A row group's rows of this cluster with a valid time: their range, count, and a sample of their times."""

    lo: int
    hi: int
    rows: int
    path: str
    group: int
    sample: np.ndarray

    def rows_in(self, lo: int, hi: int) -> int:
        """About how many of its rows fall in [lo, hi) (from the sample; never 0 when its range meets [lo, hi))."""
        inside = np.count_nonzero((self.sample >= lo) & (self.sample < hi))
        return max(1, round(self.rows * inside / len(self.sample)))


@dataclass
class TimeChunk:
    """A time range [lo, hi) of the cluster's rows, decided together: the row groups read from the files for it,
    each with the later chunks that take their rows of that group from this read (held until then) instead of
    reading the group again. A journal written out of time order (failed polls appended at the end, another
    tool's export) has a row group spanning every chunk: read once, its few rows of each chunk held."""

    lo: int
    hi: int
    reads: list[tuple[str, int, tuple[int, ...]]]  # (file, row group, later chunks served by this read)


def read_parts(chunks: list[TimeChunk], i: int, mine) -> tuple[list[tuple[pa.Table, np.ndarray]], dict]:
    """Chunk i's rows (this cluster's, valid time in its range) from its row groups, with their times, and the rows
    of those groups for the later chunks they serve, by chunk index."""
    parts, held = [], {}
    for path, group, serves in chunks[i].reads:
        table = read(path, [group], (*COLUMNS, *ORIGIN))
        t = times(table)
        ok = mine(table) & in_range(t)
        for j in (i, *serves):
            keep = ok & (t >= chunks[j].lo) & (t < chunks[j].hi)
            if keep.all():
                parts.append((table, t))
            elif keep.any():  # runs of rows as slices: a wide group's bulk is one run, its rows held a few
                rows = np.flatnonzero(keep)
                (parts if j == i else held.setdefault(j, [])).append((take_runs(table, rows), t[rows]))
    return parts, held


class ClusterFiles:
    """Decisions of one cluster over its files, chunk by chunk, under the base settings and any sweep settings."""

    def __init__(self, task: Task, settings: Settings, sweep: Sequence[Settings] = (), chunk_rows: int = CHUNK_ROWS):
        self.task = task
        self.chunk_rows = chunk_rows
        self.cluster = ClusterPass(task.cluster_id, settings, sweep)

    @property
    def outcome(self) -> Outcome:
        return self.cluster.outcome

    def _spans(self) -> list[Span]:
        """Each row group's span of this cluster's rows; rows without a valid time are rejected here. The groups
        are read on two threads (pyarrow reads and parses without the GIL), looked at in file order."""
        groups = [(path, g) for path in self.task.files for g in range(pq.ParquetFile(path).metadata.num_row_groups)]
        spans = []
        with ThreadPoolExecutor(2, thread_name_prefix="plan") as pool:
            for (path, g), (span, bad, far) in zip(groups, pool.map(lambda group: self._span(*group), groups)):
                if bad is not None:  # rare: read the group again with what a rejection shows
                    table = read(path, [g], (*COLUMNS, *ORIGIN))
                    for rows, code in ((bad, C_TIME), (far, C_RANGE)):
                        if rows.any():
                            self.cluster.reject_rows(table.filter(pa.array(rows)), code)
                if span is not None:
                    spans.append(span)
        return spans

    def _span(self, path: str, g: int) -> tuple[Span | None, np.ndarray | None, np.ndarray | None]:
        """Row group g's span of this cluster's rows with a valid time (None: no such row), and its rows of this
        cluster whose time is not a timestamp and those out of the journal's range (None, None: there are none)."""
        table = read(path, [g], ("cluster_id", "observed_at", "observed_us"))
        mine = self.cluster.mine(table)
        t = times(table)
        bad = mine & (t == BAD_TIME)
        far = mine & (t != BAD_TIME) & ((t < rules.EARLIEST_US) | (t >= rules.LATEST_US))
        good = t[mine & in_range(t)]
        span = None
        if len(good):  # every k-th row's time: how the group's rows spread over time, without a sort
            sample = good[::max(1, len(good) // SAMPLE)]
            span = Span(int(good.min()), int(good.max()), len(good), path, g, sample)
        return (span, bad, far) if bad.any() or far.any() else (span, None, None)

    def _bounds(self, spans: list[Span]) -> list[tuple[int, int]]:
        """Chunks' time ranges [lo, hi): cut where the row groups ending so far hold chunk_rows rows, at the start of
        the next group when it begins before that one ends (a snapshot split across two row groups): the first
        group's few rows past the cut are held for the next chunk, where the cut at its end read the next group
        twice, for its few rows before the cut and again for the rest."""
        ordered = sorted(spans, key=lambda s: (s.hi, s.lo))
        bounds, rows, lo = [], 0, -2 ** 62
        for i, span in enumerate(ordered):
            rows += span.rows
            if (rows >= self.chunk_rows or i == len(ordered) - 1) and span.hi + 1 > lo:
                cut = span.hi + 1
                if i + 1 < len(ordered) and lo < ordered[i + 1].lo < cut:
                    cut = ordered[i + 1].lo
                bounds.append((lo, cut))
                lo, rows = cut, 0
        return bounds

    def _plan(self) -> list[TimeChunk]:
        """The chunks in time order, each row group read once where its later rows can be held: at most chunk_rows
        rows held at any time, and rows x chunks held at most chunk_rows (a wide group's few rows of each chunk are
        held, its bulk far ahead is read again when its turn comes rather than held all along)."""
        spans = self._spans()
        chunks = [TimeChunk(lo, hi, []) for lo, hi in self._bounds(spans)]
        held = np.zeros(len(chunks), np.int64)  # rows held for later chunks while each chunk is decided
        for span in sorted(spans, key=lambda s: (s.lo, s.hi)):
            serves = None  # the read that holds this group's rows for later chunks
            for j, c in enumerate(chunks):
                if span.hi < c.lo or span.lo >= c.hi:
                    continue
                n = span.rows_in(c.lo, c.hi)
                if serves is not None and held[serves[0]:j].max() + n <= self.chunk_rows and \
                        n * (j - serves[0]) <= self.chunk_rows:
                    serves[1].append(j)
                    held[serves[0]:j] += n
                    continue
                serves = (j, [])
                c.reads.append((span.path, span.group, serves[1]))
        for c in chunks:
            c.reads = [(path, g, tuple(serves)) for path, g, serves in c.reads]
        return chunks

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The cluster's records, chunk by chunk in time order; rejections gather in self.outcome."""
        chunks = self._plan()
        if self.task.cluster_id is None:
            for path, g in dict.fromkeys((path, g) for c in chunks for path, g, _ in c.reads):
                table = read(path, [g], (*COLUMNS, *ORIGIN))
                self.cluster.reject_rows(table.filter(pa.array(self.cluster.mine(table))), 1)
            return
        held: dict[int, list] = {}

        def read_chunk(i: int) -> list[tuple[pa.Table, np.ndarray]]:
            parts, holds = read_parts(chunks, i, self.cluster.mine)
            for j, more in holds.items():
                held.setdefault(j, []).extend(more)
            return parts + held.pop(i, [])

        def load(parts: list[tuple[pa.Table, np.ndarray]]) -> Prepared | None:
            if not parts:
                return None
            table = pa.concat_tables([p for p, _ in parts], promote_options="permissive") if len(parts) > 1 else \
                parts[0][0]
            return prepare(table, np.concatenate([t for _, t in parts]))

        # Three stages on their own threads, chunk after chunk: a chunk is read (pyarrow, mostly without the GIL)
        # while the one before it is grouped and checked and the one before that decided (numba, without the GIL).
        with ThreadPoolExecutor(1, thread_name_prefix="read") as reader, \
                ThreadPoolExecutor(1, thread_name_prefix="prepare") as preparer:
            rows = [reader.submit(read_chunk, i) for i in range(min(2, len(chunks)))]
            pending = preparer.submit(lambda: load(rows[0].result())) if chunks else None
            for i in range(len(chunks)):
                prepared = pending.result()
                if i + 1 < len(chunks):
                    pending = preparer.submit(lambda read_next=rows[i + 1]: load(read_next.result()))
                if i + 2 < len(chunks):
                    rows.append(reader.submit(read_chunk, i + 2))
                rows[i] = None  # read and prepared: its rows go with the Prepared
                if prepared is not None:
                    batch = self.cluster.decide(prepared)
                    if batch is not None:
                        yield batch
