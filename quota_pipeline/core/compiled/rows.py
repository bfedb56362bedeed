"""Rows of a table taken alike from each column asked for, by whichever of slicing, filtering or gathering copies least:
how the input frame reads only the columns and rows a decision needs."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


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


def take_runs(table: pa.Table, order: np.ndarray) -> pa.Table:
    """table.take(order), by slices where the order keeps runs of consecutive rows: a journal written almost in
    time order (failed polls appended at the end, the rows of another file) moves a few rows, not every row."""
    cuts = np.flatnonzero(np.diff(order) != 1) + 1
    # Dictionary columns read from several row groups share one dictionary first: concatenating slices of columns
    # with different dictionaries would unify them slice by slice, far slower than once.
    table = table.unify_dictionaries()
    if len(cuts) > 64:  # many runs: one gather (over whole columns: a chunked one gathers chunk by chunk)
        return table.combine_chunks().take(pa.array(order))
    begins = np.concatenate([[0], cuts])
    ends = np.append(cuts, len(order))
    return pa.concat_tables([table.slice(order[b], e - b) for b, e in zip(begins, ends)]).combine_chunks()
