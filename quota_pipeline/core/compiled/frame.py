"""The input frame of the compiled decision: one cluster's flattened rows (a status row per snapshot, a row per volume)
grouped into snapshots in time order, checked against the snapshot rules (core/compiled/rule_codes.py) and, for the
snapshots kept, read into the kernel's columns. Nothing carried from an earlier chunk is needed, so replay prepares the
next chunk on another core while this one is decided."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.core.compiled import arrays, row_order, rule_codes
from quota_pipeline.core.compiled.rows import Rows
from quota_pipeline.core.columns import UTC_US
from quota_pipeline.core.model import RecordError, epoch_micros, parse_time

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


@dataclass(frozen=True)
class Origin:
    """Where each row of a chunk came from, as numbers that order its rows: the source (a journal file's rank among
    the chunk's files; for the streaming job, the snapshot the row belongs to) and the place in it (offset, line;
    zeros where the source is one snapshot). A snapshot is the rows of one (time, source)."""

    source: np.ndarray  # int64 per row
    offset: np.ndarray
    line: np.ndarray

    @classmethod
    def of_snapshots(cls, snapshot: np.ndarray) -> "Origin":
        """Rows handed over snapshot by snapshot: `snapshot` per row, each snapshot's rows in their order."""
        zeros = np.zeros(len(snapshot), np.int64)
        return cls(np.asarray(snapshot, np.int64), zeros, zeros)


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
    """A chunk's rows grouped into snapshots in (time, source, offset, line) order and checked against the rules, with
    the readings of the snapshots kept (None: none kept). The table stays in the order it was read: `order` maps the
    sorted positions (starts, t) to its rows, so only the columns a decision needs are taken, and only for the rows
    it needs. It needs nothing a previous chunk carried, so replay prepares the next chunk on another core while this
    one is decided."""

    table: pa.Table
    order: np.ndarray | None     # sorted position -> the table's row (None: the table is in that order)
    t: np.ndarray                # per sorted position: its time
    starts: np.ndarray           # each snapshot's first sorted position
    code: np.ndarray             # per snapshot: the first rule it breaks (rule_codes.VALID: none)
    valid: np.ndarray            # per snapshot: it breaks none
    vs: np.ndarray               # the valid snapshots
    repeat: np.ndarray           # per valid snapshot: the same time as the valid one before it (a duplicate)
    first_of_run: np.ndarray     # per valid snapshot: the first valid one of its time (index into vs)
    readings: Readings | None

    def row(self, position: int) -> int:
        """The table's row at a sorted position."""
        return int(position if self.order is None else self.order[position])


def prepare(table: pa.Table, t: np.ndarray, origin: Origin) -> Prepared:
    """A chunk's rows (one cluster's, its dictionary columns unified: pa.Table.unify_dictionaries; `t`: their times;
    `origin`: where each came from) sorted, grouped into snapshots, checked against the snapshot rules and, for the
    snapshots kept, read into the kernel's columns."""
    source = origin.source.astype(np.int64, copy=False)
    order = None
    if not row_order.lex_sorted(t, source, origin.offset, origin.line):
        order = np.lexsort((origin.line, origin.offset, source, t))
        t, source = t[order], source[order]
    n = table.num_rows
    # Snapshots: one (time, source) each; their rows are consecutive sorted positions.
    new = np.ones(n, bool)
    new[1:] = (t[1:] != t[:-1]) | (source[1:] != source[:-1])
    starts = np.flatnonzero(new)
    snap_of = np.cumsum(new) - 1
    code = rule_codes.snapshot_codes(table, order, starts, snap_of)
    # The same time from another source is a duplicate of the first valid one (by source, then place).
    # Valid snapshots are in (time, source) order: a duplicate follows the first of its time directly.
    valid = code == rule_codes.VALID
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
    positions = np.flatnonzero(keep[snap_of] & arrays.in_order(arrays.is_valid(table.column("broker_id")), order))
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
        offline=arrays.is_valid(err) | arrays.is_null(tot) | arrays.is_null(av))


def _first_non_null(column: pa.ChunkedArray, order: np.ndarray | None, starts: np.ndarray,
                    keep: np.ndarray) -> pa.Array:
    """Per kept snapshot, the value of its first row that has one (a null when none has)."""
    if not column.null_count:
        first = starts[keep]
    else:
        first = arrays.first_where(arrays.in_order(arrays.is_valid(column), order), starts)[keep]
        first = np.where(first >= len(column), starts[keep], first)  # none has it: the first row (a null)
    return Rows(_table_rows(first, order)).take(column)
