"""One cluster's flattened journal rows in, its decision records out: checked against core/snapshot_rules.py, decided by
core/kernel.py, the kernel's state carried from one table of rows to the next. Serves both jobs: replay hands it
time chunks read from files (replay/cluster_files.py), the streaming job a micro-batch's rows
(streaming/processor.py, the state in Spark's state store). It reads no files and knows no Spark.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core import cache, kernel, row_order
from quota_pipeline.core.columns import COLUMNS, PARTITION, TOPICS, TYPES  # noqa: F401 - read by replay and the job
from quota_pipeline.core.model import (STOP_CLUSTER, STOP_TOPICS, STOP_TOPICS_BUDGET, RecordError, epoch_micros,
                                       parse_time, stop_json_bytes)
from quota_pipeline.core.exemption import StopExemption
from quota_pipeline.core.settings import Settings
from quota_pipeline.core import snapshot_rules as rules

STATE_MAGIC = b"quota-pipeline state 2\n"  # to_bytes' form; earlier forms: an Arrow IPC stream, an npz archive
STATE_FIELDS = ("has", "pinned", "observed", "total", "available", "offline", "fill", "row", "hist_t", "hist_a",
                "hist_n", "registered", "decision", "eta", "env_t", "env_a", "env_n", "env_m")
CLOSEST = pa.struct([
    ("broker_id", pa.int64()), ("log_dir", pa.string()), ("available_bytes", pa.int64()),
    ("total_bytes", pa.int64()), ("available_ratio", pa.float64()), ("headroom_bytes", pa.float64()),
    ("fill_rate_bytes_per_second", pa.float64()), ("eta_seconds", pa.float64()),
    ("top_partitions", pa.list_(PARTITION)), ("reason", pa.string()),
])
WORST = pa.struct([("broker_id", pa.int64()), ("log_dir", pa.string()), ("available_bytes", pa.int64()),
                   ("available_ratio", pa.float64())])
PREDICTIVE = pa.struct([("broker_id", pa.int64()), ("log_dir", pa.string()), ("eta_seconds", pa.float64()),
                        ("horizon_seconds", pa.float64())])
STOP = pa.struct([("scope", pa.string()), ("topics", TOPICS)])
UTC_US = pa.timestamp("us", tz="UTC")
# What a task returns per snapshot; job.py adds the constant columns (schema version, decided_at, limits).
RECORD = pa.schema([
    ("cluster_id", pa.string()), ("observed_at", UTC_US), ("throttle_factor", pa.float64()), ("source", pa.string()),
    ("valid_until", UTC_US), ("status", pa.string()), ("active_brokers", pa.int32()),
    ("active_log_dirs", pa.int64()), ("missing_brokers", pa.list_(pa.int64())), ("violations", pa.int32()),
    ("worst_volume", WORST), ("min_available_ratio", pa.float64()), ("throttled_since", UTC_US),
    ("closest_volumes", pa.list_(CLOSEST)), ("predictive", PREDICTIVE), ("stop", STOP),
])
# Where each row came from (replay/cluster_files.py: staged JSONL's file and line, or the Parquet file's row).
ORIGIN = ("_file", "_offset", "_line")

# Rule codes in the order both other readers check them (rules.first_problem): the first broken one is reported.
DISAGREE = "rows of one snapshot disagree on status"
DUPLICATE = "duplicate snapshot of this cluster and observed_at"
REASONS = (DISAGREE,) + tuple(r.reason for r in rules.SNAPSHOT_RULES[1:]) + tuple(
    r.reason for r in rules.VOLUME_RULES) + (rules.DUPLICATE_VOLUMES.reason,)
C_TIME, C_RANGE, C_STATUS, C_BROKERS, C_FENCED, C_PARTS = 2, 3, 4, 5, 6, 7  # rules.SNAPSHOT_RULES' indexes
assert REASONS[C_RANGE].startswith("observed_at must be from") and REASONS[C_STATUS].startswith("status")
C_VOLUME = len(rules.SNAPSHOT_RULES)
C_DUP_VOLUMES = len(REASONS) - 1
VALID = len(REASONS)


@dataclass
class Outcome:
    """What a task found besides the records: rejected snapshots, and per setting (0: the replay's own, then the
    sweep's) what it decided at each snapshot, for the summary and the sweep table."""

    rejected: list[dict] = field(default_factory=list)
    snapshots: int = 0
    t: list[np.ndarray] = field(default_factory=list)        # per chunk: observed_at µs
    failed: list[np.ndarray] = field(default_factory=list)   # per chunk: the poll failed
    filled: list[np.ndarray] = field(default_factory=list)   # per chunk: bytes written since the last snapshot
    decided: list[list[tuple[np.ndarray, ...]]] = field(default_factory=list)  # per setting, per chunk

    def series(self, setting: int) -> tuple[np.ndarray, ...]:
        """(t, failed, factor, fallback, violations, least available ratio, least headroom) of one setting, whole."""
        def cat(parts: list[np.ndarray], dtype) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        per_chunk = self.decided[setting] if setting < len(self.decided) else []
        columns = list(zip(*per_chunk)) or [[]] * 5
        return (cat(self.t, np.int64), cat(self.failed, bool), cat(list(columns[0]), float),
                cat(list(columns[1]), bool), cat(list(columns[2]), np.int64), cat(list(columns[3]), float),
                cat(list(columns[4]), float))

    def written(self) -> np.ndarray:
        """Per snapshot, the bytes its log dirs grew by since their previous readings (filled_bytes), whole."""
        return np.concatenate(self.filled) if self.filled else np.zeros(0)


BAD_TIME = np.iinfo(np.int64).min  # an observed_at that is not a timestamp (every int64 is a valid µs time)


def parsetimes(values: pa.Array) -> np.ndarray:
    """observed_at strings to epoch µs (int64), BAD_TIME where a value is not an ISO-8601 timestamp (rules.py's test);
    a time without a zone is UTC, as model.parse_time reads it. Each distinct string is parsed once."""
    encoded = pc.dictionary_encode(values).combine_chunks() if isinstance(values, pa.ChunkedArray) else \
        pc.dictionary_encode(values)
    words = encoded.dictionary
    try:
        parsed = pc.cast(words, UTC_US).cast(pa.int64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        parsed = np.array([_parse_one(w) for w in words.to_pylist()], dtype=np.int64)
    if len(parsed) == 0:
        return np.full(len(values), BAD_TIME, np.int64)
    idx = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    out = parsed[idx]
    if encoded.indices.null_count:
        out[encoded.indices.is_null().to_numpy(zero_copy_only=False)] = BAD_TIME
    return out


def in_range(t: np.ndarray) -> np.ndarray:
    """Valid times within the journal's range (rules.EARLIEST .. LATEST); BAD_TIME is below it."""
    return (t >= rules.EARLIEST_US) & (t < rules.LATEST_US)


def _parse_one(text: str | None) -> int:
    if rules._timestamp(text) is None:
        return BAD_TIME
    try:
        return epoch_micros(parse_time(text))
    except RecordError:  # year 1 or 9999 moved out of datetime's range by its offset: out of the journal's range
        return rules.LATEST_US


def times(table: pa.Table) -> np.ndarray:
    """Each row's observed_at in µs: observed_us where the store wrote it, else the parsed text."""
    t = parsetimes(table.column("observed_at"))
    if "observed_us" in table.column_names:
        us = table.column("observed_us")
        if us.null_count < len(us):
            have = us.is_valid().to_numpy(zero_copy_only=False)
            t[have] = us.fill_null(0).to_numpy()[have]
    return t


def _row_values(data: bytes) -> dict[str, pa.Array]:
    """Each column's one list value of an Arrow IPC row (`_one_row`'s columns), by name."""
    with pa.ipc.open_stream(pa.py_buffer(data)) as r:
        row = r.read_all()
    return {name: row.column(name).combine_chunks().flatten() for name in row.column_names}


def _one_row(values: pa.Array | pa.ChunkedArray) -> pa.ListArray:
    """`values` as the one list value of a one-row column."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    return pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)


@dataclass
class Readings:
    """A chunk's kept snapshots and their volume rows, in the kernel's terms where no carried state is needed."""

    t: np.ndarray                 # per kept snapshot: its time (µs)
    ok: np.ndarray                # ... whether its poll succeeded
    status: pa.Array              # ... its status (its first row that has one)
    brokers: pa.Array             # ... its brokers list (idem)
    fenced: pa.Array              # ... its fenced brokers list (idem)
    rows_at: np.ndarray           # its volume rows begin at rows_at[i] (one more entry: their end)
    vrows: np.ndarray             # the volume rows' rows in the chunk's table
    dirs: pa.DictionaryArray      # ... their log dirs
    row_b: np.ndarray             # ... their broker ids
    partitions: pa.Array          # ... their top partitions
    total: np.ndarray             # ... their bytes (0 when offline)
    available: np.ndarray
    offline: np.ndarray           # ... a reading without bytes, or with an error: an offline report


@dataclass
class Prepared:
    """A chunk's rows grouped into snapshots in (time, file, offset, line) order and checked against the rules, with
    the readings of the snapshots kept (None: none kept). The table stays in the order it was read: `order` maps the
    sorted positions (starts, t) to its rows, so only the columns a decision needs are taken, and only for the rows
    it needs. It needs nothing a previous chunk carried, so replay prepares the next chunk on another core while this
    one is decided."""

    table: pa.Table
    order: np.ndarray | None     # sorted position -> the table's row (None: the table is in that order)
    t: np.ndarray                # per sorted position: its time
    starts: np.ndarray           # each snapshot's first sorted position
    code: np.ndarray             # per snapshot: the first rule it breaks (VALID: none)
    valid: np.ndarray            # per snapshot: code == VALID
    vs: np.ndarray               # the valid snapshots
    repeat: np.ndarray           # per valid snapshot: the same time as the valid one before it (a duplicate)
    first_of_run: np.ndarray     # per valid snapshot: the first valid one of its time (index into vs)
    readings: Readings | None

    def row(self, position: int) -> int:
        """The table's row at a sorted position."""
        return int(position if self.order is None else self.order[position])


def prepare(table: pa.Table, t: np.ndarray) -> Prepared:
    """A chunk's rows (this cluster's, with ORIGIN columns; `t`: their times) sorted, grouped, checked and, for the
    snapshots kept, read into the kernel's columns."""
    # Dictionary columns read from several row groups share one dictionary, so rows of any of them compare and
    # take alike.
    table = table.unify_dictionaries()
    files = table.column("_file").combine_chunks()  # dictionary-encoded by _read: no string per row
    names = files.dictionary.to_pylist()
    rank = np.argsort(np.argsort(np.array(names, dtype=object)))  # file names in sorted order
    file_rank = rank[files.indices.to_numpy(zero_copy_only=False)] if len(names) else np.zeros(0, np.int64)
    offsets = table.column("_offset").to_numpy().astype(np.int64, copy=False)
    lines = table.column("_line").to_numpy().astype(np.int64, copy=False)
    order = None
    if not row_order.lex_sorted(t, file_rank.astype(np.int64, copy=False), offsets, lines):
        order = np.lexsort((lines, offsets, file_rank, t))
        t, file_rank = t[order], file_rank[order]
    n = table.num_rows
    # Snapshots: one (time, file) each; their rows are consecutive sorted positions.
    new = np.ones(n, bool)
    new[1:] = (t[1:] != t[:-1]) | (file_rank[1:] != file_rank[:-1])
    starts = np.flatnonzero(new)
    snap_of = np.cumsum(new) - 1
    is_volume = _is_volume(table)
    code = _sorted(_row_codes(table, is_volume), order)
    _snapshot_codes(table, order, starts, snap_of, code, _sorted(is_volume, order))
    code = np.minimum.reduceat(code, starts)
    # The same time from another file is a duplicate of the first valid one (by file, then line).
    # Valid snapshots are in (time, file) order: a duplicate follows the first of its time directly.
    valid = code == VALID
    vs = np.flatnonzero(valid)
    vt = t[starts[vs]]
    repeat = np.zeros(len(vs), bool)
    repeat[1:] = vt[1:] == vt[:-1]
    first_of_run = np.maximum.accumulate(np.where(repeat, 0, np.arange(len(vs))))
    first_of_time = np.ones(len(starts), bool)
    first_of_time[vs[repeat]] = False
    keep = valid & first_of_time
    readings = _readings(table, order, t, starts, snap_of, keep) if keep.any() else None
    return Prepared(table, order, t, starts, code, valid, vs, repeat, first_of_run, readings)


def _sorted(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """Per-row values of the table in sorted order."""
    return values if order is None else values[order]


def _table_rows(positions: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """The table's rows at sorted positions."""
    return positions if order is None else order[positions]


def _readings(table: pa.Table, order: np.ndarray | None, t: np.ndarray, starts: np.ndarray, snap_of: np.ndarray,
              keep: np.ndarray) -> Readings:
    first_rows = starts[keep]
    # A snapshot's status and broker lists are those of its first row that has them.
    status = _first_non_null(table.column("status"), order, starts, keep)
    ok = pc.equal(status, "SUCCESS").fill_null(False).to_numpy(zero_copy_only=False)
    new_index = np.cumsum(keep) - 1
    # Every volume row, a failed poll's too: a partial view's readings are observations of the brokers that
    # answered (a failed poll that reached none has no volume row).
    positions = np.flatnonzero(keep[snap_of] & _sorted(_valid(table.column("broker_id")), order))
    rows_at = np.searchsorted(new_index[snap_of[positions]], np.arange(len(first_rows) + 1)) if len(positions) else \
        np.zeros(len(first_rows) + 1, np.int64)
    vrows = _table_rows(positions, order)
    at = Rows(vrows)
    err, tot, av = (at.take(table.column(c)) for c in ("error", "total_bytes", "available_bytes"))
    return Readings(
        t=t[first_rows].astype(np.int64), ok=ok, status=status,
        brokers=_first_non_null(table.column("brokers"), order, starts, keep),
        fenced=_first_non_null(table.column("fenced_brokers"), order, starts, keep),
        rows_at=rows_at.astype(np.int64), vrows=vrows, dirs=pc.dictionary_encode(at.take(table.column("log_dir"))),
        row_b=at.take(table.column("broker_id")).to_numpy(zero_copy_only=False).astype(np.int64),
        partitions=at.take(table.column("top_partitions")),
        total=tot.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64),
        available=av.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64),
        offline=_valid(err) | _null(tot) | _null(av))


def _first_non_null(column: pa.ChunkedArray, order: np.ndarray | None, starts: np.ndarray,
                    keep: np.ndarray) -> pa.Array:
    """Per kept snapshot, the value of its first row that has one (a null when none has)."""
    if not column.null_count:
        first = starts[keep]
    else:
        first = _first_where(_sorted(_valid(column), order), starts)[keep]
        first = np.where(first >= len(column), starts[keep], first)  # none has it: the first row (a null)
    return Rows(_table_rows(first, order)).take(column)


class Rows:
    """Rows of a table, taken alike from each column asked for, looked at once: consecutive rows are sliced (a
    micro-batch's one snapshot; a journal's snapshots that all have volumes), most rows of a column in their order
    filtered by a mask (a chunk's volume rows), others gathered chunk by chunk (a take over a chunked list column
    combines the column first, a copy of every row for a few of them)."""

    def __init__(self, rows: np.ndarray):
        self.rows = np.asarray(rows, np.int64)
        step = np.diff(self.rows)
        self.consecutive = len(self.rows) > 1 and bool((step == 1).all())
        self.increasing = bool((step > 0).all())
        self.ascending = self.increasing or bool((step >= 0).all())
        self._mask: pa.BooleanArray | None = None

    def take(self, column: pa.ChunkedArray) -> pa.Array:
        """column.take(rows) as one array."""
        rows = self.rows
        if self.consecutive:
            return column[int(rows[0]):int(rows[-1]) + 1].combine_chunks()
        if self.increasing and len(rows) * 4 > len(column):
            if self._mask is None or len(self._mask) != len(column):
                mask = np.zeros(len(column), bool)
                mask[rows] = True
                self._mask = pa.array(mask)
            return column.filter(self._mask).combine_chunks()
        if column.num_chunks == 1:
            return column.chunk(0).take(pa.array(rows))
        if not len(rows) or column.num_chunks == 0:
            return pa.array([], column.type)
        bounds = np.concatenate([[0], np.cumsum([len(c) for c in column.chunks])])
        if self.ascending:  # each chunk's rows are a run of them
            return _take_by_chunk(column, rows, bounds)
        if not pa.types.is_nested(column.type):  # a gather over the chunks copies no more than the rows taken
            return column.take(pa.array(rows)).combine_chunks()
        order = np.argsort(np.searchsorted(bounds, rows, side="right"), kind="stable")  # chunk by chunk, each
        taken = _take_by_chunk(column, rows[order], bounds)                             # chunk's in the order asked
        back = np.empty(len(rows), np.int64)
        back[order] = np.arange(len(rows))
        return taken.take(pa.array(back))


def _take_by_chunk(column: pa.ChunkedArray, rows: np.ndarray, bounds: np.ndarray) -> pa.Array:
    """column.take(rows) for rows grouped by chunk in chunk order (bounds: each chunk's first row, then the end)."""
    cut = np.searchsorted(rows, bounds)
    return pa.concat_arrays([column.chunk(c).take(pa.array(rows[cut[c]:cut[c + 1]] - bounds[c]))
                             for c in range(column.num_chunks) if cut[c + 1] > cut[c]])


class ClusterPass:
    """Decisions of one cluster (None: the rows without a cluster id), table by table, under the base settings and
    any sweep settings."""

    def __init__(self, cluster_id: str | None, settings: Settings, sweep: Sequence[Settings] = ()):
        self.cluster_id = cluster_id
        self.params = [kernel.Params.of(settings)] + [kernel.Params.of(s) for s in sweep]
        self.exemption = settings.exemption  # the records are the base settings': their stop's topics
        self.outcome = Outcome(decided=[[] for _ in self.params])
        self.states: list[kernel.State] | None = None
        self.last: kernel.Out | None = None  # the kernel's output for the last chunk, under the base settings
        self.keys = (np.zeros(0, np.int64), np.zeros(0, object))   # carried log dirs: broker ids, names
        self.brokers = np.zeros(0, np.int64)                       # carried broker ids
        self.partitions = pa.array([], pa.list_(PARTITION))        # top partitions of carried readings
        self.topics = pa.array([], TOPICS)                         # their topics (null: not known), row for row
        self.used = np.zeros(0)                                    # per carried log dir: last used bytes read, NaN

    def use(self, settings: Settings) -> None:
        """Decide the next tables under `settings` alone (the streaming job: each run of snapshots under its own
        configured cluster's), the carried state kept."""
        self.params = [kernel.Params.of(settings)]
        self.exemption = settings.exemption

    def mine(self, table: pa.Table) -> np.ndarray:
        """Per row: it belongs to this cluster (None: no cluster id, or an empty one)."""
        c = table.column("cluster_id")
        if self.cluster_id is None:
            return _equal(c, "", null=True)
        return _equal(c, self.cluster_id, null=False)

    # ---- the pass ---------------------------------------------------------------------------------------------
    def decide(self, table: pa.Table | Prepared, t: np.ndarray | None = None) -> pa.RecordBatch | None:
        """The records of the flattened rows in `table` (this cluster's, with ORIGIN columns; `t`: their times,
        else read from observed_us or observed_at), or of a chunk `prepare` made of them, continuing from the
        carried state. `self.last` then holds the kernel's output under the base settings."""
        if not isinstance(table, Prepared):
            if not table.num_rows:
                return None
            table = prepare(table, times(table) if t is None else t)
        return self._chunk(table)

    def _chunk(self, c: Prepared) -> pa.RecordBatch | None:
        table, starts = c.table, c.starts
        for j in np.flatnonzero(c.repeat):
            first = c.row(starts[c.vs[c.first_of_run[j]]])
            self._reject_snapshot(table, c.row(starts[c.vs[j]]), DUPLICATE, first=first)
        for s in np.flatnonzero(~c.valid):
            self._reject_snapshot(table, c.row(starts[s]), REASONS[c.code[s]])
        if c.readings is None:
            return None
        return self._decide(c)

    # ---- rejects ----------------------------------------------------------------------------------------------
    def reject_rows(self, table: pa.Table, code: int) -> None:
        """Rows rejected before they are grouped: one rejection per (file, observed_at) at its first row."""
        seen = set()
        for r in table.select(["_file", "_offset", "_line", "cluster_id", "observed_at", "status", "brokers",
                               "fenced_brokers"]).to_pylist():
            if (r["_file"], r["observed_at"]) in seen:
                continue
            seen.add((r["_file"], r["observed_at"]))
            self.outcome.rejected.append(_rejection(r, REASONS[code]))

    def _reject_snapshot(self, table: pa.Table, row: int, reason: str, first: int | None = None) -> None:
        r = table.slice(row, 1).select(["_file", "_offset", "_line", "cluster_id", "observed_at", "status",
                                        "brokers", "fenced_brokers"]).to_pylist()[0]
        at = None
        if first is not None:
            f = table.slice(first, 1).select(["_file", "_offset", "_line"]).to_pylist()[0]
            at = {"file": f["_file"], "offset": f["_offset"], "line": f["_line"]}
        self.outcome.rejected.append(_rejection(r, reason, at))

    # ---- decisions --------------------------------------------------------------------------------------------
    def _decide(self, c: Prepared) -> pa.RecordBatch:
        """The kept snapshots of a prepared chunk through the kernel under every setting; their records."""
        r = c.readings
        assert r is not None
        n_snaps = len(r.t)
        key_broker_id, key_name, carried_key_of, row_key = self._log_dirs(r.dirs, r.row_b)
        broker_ids, lists, key_broker, carried_broker_of = self._brokers(key_broker_id, r.brokers, r.fenced)
        # Readings this chunk: their rows in a partitions table that begins with the carried readings'.
        carried = len(self.partitions)
        parts_all = pa.concat_arrays([self.partitions, r.partitions]) if len(r.vrows) or carried else \
            self.partitions
        # Their topics, taken only for the rows a stop or the carried state needs (a row of a reading a stop refuses).
        topics = RowTopics(self.topics, c.table.column("topics"), r.vrows)
        chunk = kernel.Chunk(
            t=r.t, ok=r.ok, brokers_at=lists[0], brokers=lists[1], fenced_at=lists[2], fenced=lists[3],
            rows_at=r.rows_at, key=row_key.astype(np.int64), total=r.total, available=r.available, offline=r.offline,
            row=np.arange(carried, carried + len(r.vrows), dtype=np.int64), key_broker=key_broker.astype(np.int64))
        if self.states is None:
            self.states = [kernel.State.empty(len(key_broker_id), len(broker_ids)) for _ in self.params]
        else:
            self.states = [s.remap(carried_key_of, len(key_broker_id), carried_broker_of, len(broker_ids))
                           for s in self.states]
        outs = [kernel.run(state, chunk, p) for state, p in zip(self.states, self.params)]
        self.last = outs[0]
        self.outcome.snapshots += n_snaps
        self.outcome.t.append(chunk.t)
        self.outcome.failed.append(~chunk.ok)
        filled, self.used = filled_bytes(chunk, self.used, carried_key_of, len(key_broker_id))
        self.outcome.filled.append(filled)
        for decided, o, p in zip(self.outcome.decided, outs, self.params):
            decided.append((o.factor, o.source == kernel.FALLBACK, o.violations, o.min_ratio,
                            least_headroom(chunk, p)))
        batch = self._records(outs[0], chunk, r.status, key_broker_id, key_name, broker_ids, parts_all, topics)
        self._carry(key_broker_id, key_name, broker_ids, parts_all, topics)
        return batch

    def _log_dirs(self, dirs: pa.DictionaryArray, row_b: np.ndarray) -> tuple[np.ndarray, ...]:
        """Log dirs numbered in (broker_id, log_dir) order, the carried ones included: (broker id and name of each
        number, each carried log dir's new number, each volume row's number). `dirs`, `row_b`: the volume rows'
        log dirs (dictionary-encoded) and broker ids."""
        names = np.concatenate([self.keys[1], np.asarray(dirs.dictionary.to_pylist(), dtype=object)])
        uniq_names = np.array(sorted(set(names.tolist())), dtype=object)
        name_rank = {v: i for i, v in enumerate(uniq_names)}
        rank_of_dict = np.array([name_rank[v] for v in dirs.dictionary.to_pylist()], dtype=np.int64)
        row_d = rank_of_dict[dirs.indices.to_numpy(zero_copy_only=False)] if len(row_b) else np.zeros(0, np.int64)
        carried_d = np.array([name_rank[v] for v in self.keys[1]], dtype=np.int64)
        all_b = np.concatenate([self.keys[0], row_b])
        all_d = np.concatenate([carried_d, row_d])
        width = len(uniq_names) + 1
        composite = all_b * width + all_d if len(all_b) else np.zeros(0, np.int64)
        # A few distinct log dirs over millions of rows: hashed, then each row looked up among them, instead of a
        # sort of every row (np.unique).
        key_ids = np.sort(pc.unique(pa.array(composite, pa.int64())).to_numpy())
        key_of = _lookup(key_ids, composite)
        key_name = uniq_names[key_ids % width] if len(key_ids) else np.zeros(0, object)
        return key_ids // width, key_name, key_of[:len(self.keys[0])], key_of[len(self.keys[0]):]

    def _brokers(self, key_broker_id: np.ndarray, brokers: pa.Array, fenced: pa.Array) -> tuple:
        """Brokers numbered in id order: those of the log dirs, the lists, and the carried registered ones.
        (broker ids, (offsets, numbers) of the brokers lists and of the fenced ones, each log dir's broker number,
        each carried broker's new number)."""
        b_vals, b_at = _flat(brokers)
        f_vals, f_at = _flat(fenced)
        every = np.concatenate([key_broker_id, b_vals, f_vals, self.brokers])
        broker_ids = np.sort(pc.unique(pa.array(every, pa.int64())).to_numpy()) if len(every) else every
        inverse = _lookup(broker_ids, every)
        k_n, b_n, f_n = len(key_broker_id), len(b_vals), len(f_vals)
        lists = (b_at, inverse[k_n:k_n + b_n], f_at, inverse[k_n + b_n:k_n + b_n + f_n])
        return broker_ids, lists, inverse[:k_n], inverse[k_n + b_n + f_n:]

    # ---- the carried state as bytes (the streaming job keeps it in Spark's state store) ------------------------
    def to_bytes(self) -> bytes:
        """The base setting's state, its log dirs and brokers (STATE_MAGIC, a header line naming each array's type
        and shape, the arrays' bytes one after another), then the log dirs' names and the cached readings' top
        partitions and topics (an Arrow IPC row, each a list value). Saved for every cluster at every micro-batch:
        the arrays as raw bytes take a fraction of the time an Arrow column each did."""
        st = self.states[0] if self.states else kernel.State.empty(0, 0)
        arrays = {f: np.ascontiguousarray(getattr(st, f)) for f in STATE_FIELDS}
        arrays.update(key_broker=np.ascontiguousarray(self.keys[0], np.int64),
                      brokers=np.ascontiguousarray(self.brokers, np.int64))
        header = json.dumps({name: [a.dtype.str, list(a.shape)] for name, a in arrays.items()},
                            separators=(",", ":")).encode("ascii")
        batch = pa.record_batch([_one_row(pa.array(list(self.keys[1]), pa.string())), _one_row(self.partitions),
                                 _one_row(self.topics)], names=["key_name", "p", "topics"])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_batch(batch)
        return b"".join([STATE_MAGIC, header, b"\n", *(a.tobytes() for a in arrays.values()),
                         sink.getvalue().to_pybytes()])

    def restore(self, data: bytes) -> "ClusterPass":
        """The state to_bytes wrote (or, from a checkpoint of an earlier version, the Arrow row or the npz it
        wrote), carried on from here."""
        if data[:2] == b"PK":
            return self._restore_npz(data)
        if not data.startswith(STATE_MAGIC):
            return self._restore_arrow(data)
        end = data.find(b"\n", len(STATE_MAGIC))
        try:
            header = json.loads(data[len(STATE_MAGIC):end]) if end > 0 else None
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            header = None
        if not isinstance(header, dict) or set(header) != {*STATE_FIELDS, "key_broker", "brokers"}:
            raise ValueError("a saved state without the arrays this job saves; not a state this job wrote")
        flat, at = {}, end + 1
        for name, spec in header.items():
            try:
                dtype, shape = np.dtype(spec[0]), tuple(spec[1])
                if dtype.kind not in "biuf" or not all(isinstance(n, int) and n >= 0 for n in shape):
                    raise ValueError(spec)
                count = int(np.prod(shape, dtype=np.int64))
                # A copy: the kernel updates its state in place, and a view of the bytes is read-only.
                flat[name] = np.frombuffer(data, dtype, count, at).reshape(shape).copy()
            except (TypeError, ValueError, IndexError, KeyError):
                raise ValueError(f"a saved state's {name} is not an array this job saves: {str(spec)[:80]}") from None
            at += count * dtype.itemsize
        return self._restored(flat, _row_values(data[at:]))

    def _restore_arrow(self, data: bytes) -> "ClusterPass":
        """The Arrow row an earlier version's to_bytes wrote: every array a list value."""
        fields = _row_values(data)
        flat = {name: np.array(fields[name].to_numpy(zero_copy_only=False))
                for name in (*STATE_FIELDS, "key_broker", "brokers")}
        keys = len(flat["key_broker"])
        widths = {"hist_t": kernel.FILL_READINGS, "hist_a": kernel.FILL_READINGS, "env_t": kernel.ETA_BUCKETS,
                  "env_a": kernel.ETA_BUCKETS, "env_m": kernel.ETA_BUCKETS}
        for name, width in widths.items():
            flat[name] = flat[name].reshape(keys, width)
        return self._restored(flat, fields)

    def _restored(self, flat: dict[str, np.ndarray], nested: dict[str, pa.Array]) -> "ClusterPass":
        self.states = [kernel.State(**{f: flat[f] for f in STATE_FIELDS})]
        self.keys = (flat["key_broker"], nested["key_name"].to_numpy(zero_copy_only=False).astype(object))
        self.brokers = flat["brokers"]
        self.used = np.full(len(self.keys[0]), np.nan)  # replay's filled_bytes only: not kept in the state
        self.partitions, self.topics = nested["p"], nested["topics"]
        return self

    def _restore_npz(self, data: bytes) -> "ClusterPass":
        z = np.load(io.BytesIO(data), allow_pickle=False)
        # A checkpoint from before the predictive step lacks its fields: State starts them empty (and one from
        # before the buckets' tops, env_m, with tops unknown: they never pass for a clean-up).
        self.states = [kernel.State(**{f: z[f] for f in STATE_FIELDS if f in z.files})]
        self.states[0].pinned = self.states[0].pinned.astype(np.int8)  # bool in checkpoints before fenced pins
        self.keys = (z["key_broker"], z["key_name"].astype(object))
        self.brokers = z["brokers"]
        self.used = np.full(len(self.keys[0]), np.nan)  # replay's filled_bytes only: not kept in the state
        with pa.ipc.open_stream(pa.py_buffer(z["partitions"].tobytes())) as r:
            saved = r.read_all()
        self.partitions = saved.column("p").combine_chunks()
        # Saved before topics were kept: the cached readings' topics are not known (a stop there is the cluster's).
        self.topics = saved.column("topics").combine_chunks() if "topics" in saved.column_names else \
            pa.nulls(len(self.partitions), TOPICS)
        return self

    def _carry(self, key_broker_id, key_name, broker_ids, parts_all, topics: "RowTopics") -> None:
        """What the next chunk needs to renumber the state: log dirs, brokers, cached readings' partitions and
        topics."""
        self.keys = (key_broker_id, key_name)
        self.brokers = broker_ids
        # Every state's cached rows (the sweep's too) move to the front of the next partitions table.
        rows = np.unique(np.concatenate([s.row[s.row >= 0] for s in self.states]))
        self.partitions = parts_all.take(pa.array(rows)) if len(rows) else pa.array([], pa.list_(PARTITION))
        self.topics = topics.of(rows)
        for s in self.states:
            have = s.row >= 0
            s.row[have] = np.searchsorted(rows, s.row[have])

    def _records(self, o: kernel.Out, chunk: kernel.Chunk, status: pa.Array, key_broker_id: np.ndarray,
                 key_name: np.ndarray, broker_ids: np.ndarray, parts_all: pa.Array,
                 topics: "RowTopics") -> pa.RecordBatch:
        s = len(chunk.t)
        params = self.params[0]
        t = pa.array(chunk.t, UTC_US)
        sources = np.array(kernel.SOURCES, dtype=object)[o.source]
        fallback = o.source == kernel.FALLBACK
        valid_until = pa.array(o.valid_from + params.validity_us, UTC_US, mask=fallback)
        since = pa.array(o.throttled_since, UTC_US, mask=o.throttled_since == kernel.NONE)
        missing = pa.ListArray.from_arrays(pa.array(o.missing_at.astype(np.int32)),
                                           pa.array(broker_ids[o.missing], pa.int64()))
        no_worst = o.worst == kernel.NONE
        w = np.where(no_worst, len(key_broker_id), o.worst)  # no worst: a masked row, read from a padding slot
        worst = pa.StructArray.from_arrays(
            [pa.array(np.append(key_broker_id, 0)[w], pa.int64()), pa.array(np.append(key_name, "")[w], pa.string()),
             pa.array(o.worst_available, pa.int64(), mask=o.worst_available == kernel.NONE),
             pa.array(o.worst_ratio, pa.float64(), mask=np.isnan(o.worst_ratio))],
            fields=list(WORST), mask=pa.array(no_worst))
        closest = self._closest(o, key_broker_id, key_name, parts_all)
        return pa.RecordBatch.from_arrays([
            pa.array(np.full(s, self.cluster_id, dtype=object), pa.string()), t, pa.array(o.factor),
            pa.array(sources, pa.string()), valid_until, status.cast(pa.string()),
            pa.array(o.active_brokers.astype(np.int32)), pa.array(o.active_log_dirs), missing,
            pa.array(o.violations.astype(np.int32)), worst,
            pa.array(o.min_ratio, pa.float64(), mask=np.isnan(o.min_ratio)), since, closest,
            self._predictive(o, key_broker_id, key_name), stop_column(o, topics, self.exemption),
        ], schema=RECORD)

    def _predictive(self, o: kernel.Out, key_broker_id: np.ndarray, key_name: np.ndarray) -> pa.Array:
        """The record's `predictive` (SnapshotSummary.predictive): null where none is in force."""
        none = o.pred_key == kernel.NONE
        k = np.where(none, len(key_broker_id), o.pred_key)  # none: a masked row, read from a padding slot
        return pa.StructArray.from_arrays(
            [pa.array(np.append(key_broker_id, 0)[k], pa.int64()), pa.array(np.append(key_name, "")[k], pa.string()),
             pa.array(np.where(none, 0.0, o.pred_eta), pa.float64()),
             pa.array(np.full(len(k), self.params[0].eta_horizon_s), pa.float64())],
            fields=list(PREDICTIVE), mask=pa.array(none))

    @staticmethod
    def _closest(o: kernel.Out, key_broker_id, key_name, parts_all: pa.Array) -> pa.Array:
        have = o.closest != kernel.NONE
        counts = have.sum(axis=1)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        k = o.closest[have]
        rows = o.c_row[have]
        # Offline entries have no partitions (an empty list, as the streaming form's ()), except a dir that went
        # offline after filling up: it keeps its last reading's, and its fill rate (cache.offline_reason).
        parts = parts_all.take(pa.array(rows, pa.int64(), mask=rows < 0))
        if parts.null_count:
            parts = pc.if_else(parts.is_null(), pa.scalar([], pa.list_(PARTITION)), parts)

        def opt_int(a):
            v = a[have]
            return pa.array(v, pa.int64(), mask=v == kernel.NONE)

        def opt_float(a):
            v = a[have]
            return pa.array(v, pa.float64(), mask=np.isnan(v))

        values = pa.StructArray.from_arrays(
            [pa.array(key_broker_id[k], pa.int64()), pa.array(key_name[k], pa.string()), opt_int(o.c_available),
             opt_int(o.c_total), opt_float(o.c_ratio), opt_float(o.c_headroom), opt_float(o.c_fill),
             opt_float(o.c_eta), parts, _reasons(o.c_available[have], o.c_fill[have])], fields=list(CLOSEST))
        return pa.ListArray.from_arrays(pa.array(offsets), values)


class RowTopics:
    """The topics of the readings' rows as the kernel numbers them (the carried readings', then this chunk's volume
    rows), taken from the columns only for the rows asked for: most rows' topics are never needed."""

    def __init__(self, carried: pa.Array, column: pa.ChunkedArray, vrows: np.ndarray):
        self.carried, self.column, self.vrows = carried, column, vrows

    def of(self, rows: np.ndarray) -> pa.Array:
        """The topics of `rows` (all >= 0), in their order; null where not known."""
        rows = np.asarray(rows, np.int64)
        n = len(self.carried)
        old = rows < n
        parts = pa.concat_arrays([self.carried.take(pa.array(rows[old])).cast(TOPICS),
                                  Rows(self.vrows[rows[~old] - n]).take(self.column).cast(TOPICS)])
        if old.all() or not old.any():
            return parts
        order = np.empty(len(rows), np.int64)
        order[np.flatnonzero(old)] = np.arange(old.sum())
        order[np.flatnonzero(~old)] = old.sum() + np.arange((~old).sum())
        return parts.take(pa.array(order))


def _list_ids(lists: pa.Array) -> tuple[np.ndarray, list]:
    """Each list's number among the distinct lists (-1 for a null list), and one row holding each: the union of a
    snapshot's topics is formed once per distinct combination of lists, not per row."""
    joined = pc.binary_join(lists, "\x1f")
    if pc.any(pc.match_substring(pc.list_flatten(lists), "\x1f")).as_py():  # no topic holds it, unless a forged one
        keys = [None if v is None else tuple(v) for v in lists.to_pylist()]
        number: dict = {}
        ids = np.array([-1 if k is None else number.setdefault(k, len(number)) for k in keys], np.int64)
    else:
        j = pc.dictionary_encode(joined).indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        length = pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        # The length tells [] from [""] (both join to "").
        uniq, ids = np.unique(np.where(j < 0, -1, j * (int(length.max(initial=0)) + 1) + length),
                              return_inverse=True)
        ids = ids.reshape(-1) - (1 if uniq[0] < 0 else 0)  # a null list: -1
    first = np.full(int(ids.max(initial=-1)) + 1, -1, np.int64)
    at = np.flatnonzero(ids >= 0)
    first[ids[at][::-1]] = at[::-1]
    return ids, first.tolist()


def stop_column(o: kernel.Out, topics: RowTopics, exemption: StopExemption) -> pa.Array:
    """The record's `stop` per snapshot (record.stop_of), over every violating entry in force the kernel listed for
    a snapshot it stopped: null above a factor of 0; the sorted union of their topics that a stop refuses (not those
    `exemption` lets through, as cache.stop_topics) when there is one, each one's topics are known and the list fits
    model.STOP_TOPICS_BUDGET as compact JSON; else the cluster (the fallback included). Topics are taken for the
    listed rows only, and each distinct combination of lists is united and filtered once (a long stop lists the same
    dirs' topics snapshot after snapshot)."""
    n = len(o.factor)
    stopped = o.factor <= 0.0
    counts = np.diff(o.stop_at)
    snap = np.repeat(np.arange(n), counts)
    rows = o.stop_row
    known = rows >= 0
    unknown = np.bincount(snap[~known], minlength=n) > 0
    lists = topics.of(rows[known])
    ids, first = _list_ids(lists) if len(lists) else (np.zeros(0, np.int64), [])
    owner = snap[known]
    unknown |= np.bincount(owner[ids < 0], minlength=n) > 0
    listed = stopped & (o.source != kernel.FALLBACK) & (counts > 0) & ~unknown
    use = listed[owner]
    width = len(first) + 1
    pairs = np.unique(owner[use] * width + ids[use])
    p_snap, p_id = pairs // width, pairs % width
    lo = np.searchsorted(p_snap, np.arange(n))
    hi = np.searchsorted(p_snap, np.arange(n), side="right")
    combos: dict[tuple, int] = {}
    combo_of = np.full(n, -1, np.int64)
    for i in np.flatnonzero(listed):
        combo_of[i] = combos.setdefault(tuple(p_id[lo[i]:hi[i]].tolist()), len(combos))
    cache: dict[int, list] = {}

    def of_list(k: int) -> list:
        if k not in cache:
            cache[k] = lists[first[k]].as_py()
        return cache[k]

    unions = [list(exemption.refusable(set().union(*(of_list(k) for k in key)))) for key in combos]
    fits = np.array([stop_json_bytes(u) <= STOP_TOPICS_BUDGET for u in unions] + [False])
    listed &= fits[combo_of]
    topic_lists = pa.array(unions, TOPICS).take(pa.array(np.where(listed, combo_of, 0), mask=~listed)) \
        if unions else pa.nulls(n, TOPICS)
    scope = np.where(listed, STOP_TOPICS, STOP_CLUSTER).astype(object)
    return pa.StructArray.from_arrays([pa.array(scope, pa.string()), topic_lists], fields=list(STOP),
                                      mask=pa.array(~stopped))


def _mark(code: np.ndarray, cond, c: int) -> None:
    """Rule c broken on the rows where `cond`: a row keeps the first rule it breaks (the lowest code)."""
    cond = np.asarray(cond, bool)
    if cond.any():  # most rules are broken by no row
        np.minimum(code, np.where(cond, code.dtype.type(c), code.dtype.type(VALID)), out=code)


def _any(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per snapshot (rows from each of `starts`): some row of it has the flag."""
    return np.logical_or.reduceat(flags, starts) if len(flags) else np.zeros(0, bool)


def _row_codes(table: pa.Table, is_volume: np.ndarray) -> np.ndarray:
    """Per row of the table, in its order, the first rule the row breaks on its own (VALID: none): the broker lists'
    and top partitions' null elements (rules.SNAPSHOT_RULES), the volume rules (rules.VOLUME_RULES) on the rows
    that read a volume (`is_volume`, per row)."""
    code = np.full(table.num_rows, VALID, np.int8)  # rule codes: a few dozen
    _mark(code, _null_elements(table.column("brokers")), C_BROKERS)
    _mark(code, _null_elements(table.column("fenced_brokers")), C_FENCED)
    parts = table.column("top_partitions")
    flat = pc.list_flatten(parts)
    if len(flat):
        broken = pc.or_kleene(pc.or_kleene(flat.is_null(), pc.struct_field(flat, "topic").is_null()), pc.or_kleene(
            pc.struct_field(flat, "partition").is_null(), pc.struct_field(flat, "size_bytes").is_null()))
        if pc.any(broken).as_py():
            per_row = np.zeros(table.num_rows, bool)
            np.logical_or.at(per_row, pc.list_parent_indices(parts).to_numpy(),
                             broken.to_numpy(zero_copy_only=False))
            _mark(code, per_row, C_PARTS)
    bid, ldir = table.column("broker_id"), table.column("log_dir")
    tot, av, err = table.column("total_bytes"), table.column("available_bytes"), table.column("error")
    # Each rule is looked at row by row only when a whole-column count says a row may break it.
    if bid.null_count:
        _mark(code, is_volume & _null(bid), C_VOLUME)
    no_dir = _equal(ldir, "", null=True)
    if no_dir.any():
        _mark(code, is_volume & no_dir, C_VOLUME + 1)
    if tot.null_count or av.null_count:
        _mark(code, is_volume & _null(err) & (_null(tot) | _null(av)), C_VOLUME + 2)
    if min(_min(tot), _min(av)) < 0:
        _mark(code, is_volume & (_np(pc.less(tot, 0).fill_null(False)) | _np(pc.less(av, 0).fill_null(False))),
              C_VOLUME + 3)
    more = _np(pc.greater(av, tot).fill_null(False))
    if more.any():
        _mark(code, is_volume & more, C_VOLUME + 4)
    topics = table.column("topics")
    if pc.list_flatten(topics).null_count:
        _mark(code, is_volume & _null_elements(topics), C_VOLUME + 5)
    return code


def _is_volume(table: pa.Table) -> np.ndarray:
    """Per row: it reads a volume (a broker id or a log dir); a snapshot without volumes has one row without."""
    return _valid(table.column("broker_id")) | _valid(table.column("log_dir"))


def _snapshot_codes(table: pa.Table, order: np.ndarray | None, starts: np.ndarray, snap_of: np.ndarray,
                    code: np.ndarray, is_volume: np.ndarray) -> None:
    """The rules over a snapshot's rows marked on `code` (per sorted position): statuses that disagree or are
    missing, a successful poll without brokers, the same log dir twice among the volume rows (`is_volume`, per
    sorted position)."""
    status = table.column("status")
    st_valid = _sorted(_valid(status), order)
    # Statuses of a snapshot must agree (nulls aside): its first non-null status is its status.
    codes = _sorted(_index_in(status, rules.STATUSES), order)
    first = _first_where(st_valid, starts)
    first_status = np.append(codes, -1)[first]  # -1: no row of the snapshot has a status
    disagree = st_valid & (codes != first_status[snap_of])
    _mark(code, _any(disagree, starts)[snap_of], 0)
    _mark(code, first_status[snap_of] < 0, C_STATUS)
    success = first_status == rules.STATUSES.index("SUCCESS")
    has_brokers = _any(_sorted(_valid(table.column("brokers")), order), starts)
    _mark(code, (success & ~has_brokers)[snap_of], C_BROKERS)
    positions = np.flatnonzero(is_volume)
    broker = _sorted(_np(table.column("broker_id").fill_null(-1)).astype(np.int64, copy=False), order)
    log_dir = _sorted(_value_numbers(table.column("log_dir")), order)
    if len(positions) and not row_order.increasing_at(snap_of, broker, log_dir, positions):
        dup = _duplicate_volumes(snap_of, broker, log_dir, positions)
        _mark(code, _any(dup, starts)[snap_of], C_DUP_VOLUMES)


def _duplicate_volumes(snap_of: np.ndarray, broker: np.ndarray, log_dir: np.ndarray,
                       positions: np.ndarray) -> np.ndarray:
    """Per sorted position: among the volume rows at `positions`, the same (snapshot, broker, log dir) came
    earlier (per sorted position: its snapshot, broker id and log dir number)."""
    s, b, d = snap_of[positions], broker[positions], log_dir[positions]
    by_key = np.lexsort((d, b, s))  # stable: of equal keys, the earliest position first
    same = (s[by_key][1:] == s[by_key][:-1]) & (b[by_key][1:] == b[by_key][:-1]) & (d[by_key][1:] == d[by_key][:-1])
    dup = np.zeros(len(snap_of), bool)
    dup[positions[by_key][1:][same]] = True
    return dup


def _value_numbers(column: pa.ChunkedArray) -> np.ndarray:
    """Per row of a string column, its value's rank among the column's distinct values (-1: null), looked up
    through the dictionary of a dictionary-encoded column (as replay reads it), not row by row."""
    column = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    words = [chunk.dictionary.to_pylist() for chunk in column.chunks]
    rank = {w: i for i, w in enumerate(sorted({w for ws in words for w in ws if w is not None}))}
    parts = []
    for chunk, ws in zip(column.chunks, words):
        number = np.array([rank.get(w, -1) for w in ws] + [-1], np.int64)
        parts.append(number[_np(chunk.indices.fill_null(len(ws)))])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def filled_bytes(chunk: kernel.Chunk, used: np.ndarray, carried_key_of: np.ndarray,
                 keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Per snapshot of `chunk`, the bytes written to its log dirs since their previous readings: the sum over log
    dirs read of the growth of used bytes (total - available) since the dir's last reading, where it grew. An
    interval holding a retention pass counts only its net growth, so this is a lower bound of what was written.
    `used`: the carried log dirs' last used bytes (NaN: none), renumbered by `carried_key_of`; returned for the
    next chunk, numbered as this chunk's log dirs."""
    last = np.full(keys, np.nan)
    last[carried_key_of] = used
    return kernel.filled(chunk.key, chunk.total, chunk.available, chunk.offline, chunk.rows_at, last), last


def least_headroom(chunk: kernel.Chunk, p: kernel.Params) -> np.ndarray:
    """Per snapshot of `chunk`, the least bytes any log dir it read had above `p`'s hard limit (negative: past it);
    NaN when it read none."""
    return kernel.least_headroom(chunk.total, chunk.available, chunk.offline, chunk.rows_at, p.hard_kind,
                                 float(p.hard_value))


def _reasons(available: np.ndarray, fill: np.ndarray) -> pa.Array:
    """closest_volumes' reason: null for a reading; an offline entry with a fill rate went offline after filling up."""
    offline = available == kernel.NONE
    which = pa.array(np.where(np.isnan(fill), 0, 1).astype(np.int8), mask=~offline)
    return pa.DictionaryArray.from_arrays(which, pa.array([cache.OFFLINE, cache.OFFLINE_FILLING])).cast(pa.string())


def _equal(column: pa.ChunkedArray, value: str, null: bool) -> np.ndarray:
    """Per row: the string column equals `value` (`null` where the row is null)."""
    found = _index_in(column, [value], null=-2)
    return (found == 0) | (found == -2) if null else found == 0


def _index_in(column: pa.ChunkedArray, values: Sequence[str], null: int = -1) -> np.ndarray:
    """Per row of a string column, the index of its value in `values`: -1 where it is none of them, `null` where
    the row is null. A dictionary-encoded column (as replay reads it) is looked up through its dictionary, not row by
    row."""
    wanted = pa.array(values, pa.string())
    if not pa.types.is_dictionary(column.type):
        found = _np(pc.index_in(column, wanted).fill_null(-1))
        return np.where(_null(column), null, found) if column.null_count else found
    parts = []
    for chunk in column.chunks:
        found = np.append(_np(pc.index_in(chunk.dictionary, wanted).fill_null(-1)), null)
        parts.append(found[_np(chunk.indices.fill_null(len(chunk.dictionary)))])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _lookup(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's index in `ids` (sorted, distinct, holding every value): a table indexed by value when the ids
    span a small range (a few log dirs or brokers, looked up for millions of rows), else a binary search."""
    if len(ids) and int(ids[-1]) - min(int(ids[0]), 0) <= 4 * len(values) + 1024:
        base = min(int(ids[0]), 0)  # ids from 0 (broker ids, log dir numbers) index the table as they are
        table = np.zeros(int(ids[-1]) - base + 1, np.int64)
        table[ids - base] = np.arange(len(ids))
        return table[values - base if base else values]
    return np.searchsorted(ids, values)


def _first_where(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per snapshot (rows from each of `starts`), its first row where `flags` is set; len(flags) when none."""
    idx = np.where(flags, np.arange(len(flags)), len(flags))
    return np.minimum.reduceat(idx, starts) if len(idx) else np.zeros(0, np.int64)


def _min(values) -> int:
    m = pc.min(values).as_py()
    return 0 if m is None else m


def take_runs(table: pa.Table, order: np.ndarray) -> pa.Table:
    """table.take(order), by slices where the order keeps runs of consecutive rows: a journal written almost in
    time order (failed polls appended at the end, the rows of another file) moves a few rows, not every row."""
    cuts = np.flatnonzero(np.diff(order) != 1) + 1
    # Dictionary columns read from several row groups share one dictionary first: concatenating slices of columns
    # with different dictionaries unifies them slice by slice (2.5 s for 2,000 runs of a 1M-row chunk).
    table = table.unify_dictionaries()
    if len(cuts) > 64:  # many runs: one gather (over whole columns: a chunked one gathers chunk by chunk)
        return table.combine_chunks().take(pa.array(order))
    begins = np.concatenate([[0], cuts])
    ends = np.append(cuts, len(order))
    return pa.concat_tables([table.slice(order[b], e - b) for b, e in zip(begins, ends)]).combine_chunks()


def _valid(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row: not null."""
    return np.ones(len(values), bool) if values.null_count == 0 else _np(values.is_valid())


def _null(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row: null."""
    return np.zeros(len(values), bool) if values.null_count == 0 else _np(values.is_null())


def _np(values) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False))


def _flat(lists: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list array, a null list as empty."""
    lists = pc.if_else(lists.is_null(), pa.scalar([], lists.type), lists) if lists.null_count else lists
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.to_numpy(zero_copy_only=False).astype(np.int64) if len(lists.values) else \
        np.zeros(0, np.int64)
    values = values[offsets[0]:offsets[-1]]
    return values, offsets - offsets[0]


def _null_elements(lists: pa.ChunkedArray) -> np.ndarray:
    """Per row: its list has a null element."""
    flat = pc.list_flatten(lists)
    out = np.zeros(len(lists), bool)
    if len(flat) and flat.null_count:
        parents = pc.list_parent_indices(lists).to_numpy()
        np.logical_or.at(out, parents, flat.is_null().to_numpy(zero_copy_only=False))
    return out


def _rejection(r: dict, reason: str, first: dict | None = None) -> dict:
    text = json.dumps({k: r[k] for k in ("cluster_id", "observed_at", "status", "brokers", "fenced_brokers")},
                      separators=(",", ":"))
    return {"file": r["_file"], "offset": r["_offset"], "line": r["_line"], "reason": reason, "text": text,
            "first": first}
