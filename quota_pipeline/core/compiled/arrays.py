"""Small conversions between Arrow columns and numpy arrays that the compiled decision's stages share: null masks,
list offsets, look-ups through a column's dictionary, per-snapshot reductions over row flags."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def is_valid(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row: not null."""
    return np.ones(len(values), bool) if values.null_count == 0 else to_numpy(values.is_valid())


def is_null(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Per row: null."""
    return np.zeros(len(values), bool) if values.null_count == 0 else to_numpy(values.is_null())


def to_numpy(values) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False))


def flat(lists: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, offsets) of a list array, a null list as empty."""
    lists = pc.if_else(lists.is_null(), pa.scalar([], lists.type), lists) if lists.null_count else lists
    offsets = lists.offsets.to_numpy().astype(np.int64)
    values = lists.values.to_numpy(zero_copy_only=False).astype(np.int64) if len(lists.values) else \
        np.zeros(0, np.int64)
    values = values[offsets[0]:offsets[-1]]
    return values, offsets - offsets[0]


def null_elements(lists: pa.ChunkedArray) -> np.ndarray:
    """Per row: its list has a null element."""
    flat = pc.list_flatten(lists)
    out = np.zeros(len(lists), bool)
    if len(flat) and flat.null_count:
        parents = pc.list_parent_indices(lists).to_numpy()
        np.logical_or.at(out, parents, flat.is_null().to_numpy(zero_copy_only=False))
    return out


def index_in(column: pa.ChunkedArray, values: Sequence[str], null: int = -1) -> np.ndarray:
    """Per row of a string column, the index of its value in `values`: -1 where it is none of them, `null` where
    the row is null. A dictionary-encoded column (as replay reads it) is looked up through its dictionary, not row by
    row."""
    wanted = pa.array(values, pa.string())
    if not pa.types.is_dictionary(column.type):
        found = to_numpy(pc.index_in(column, wanted).fill_null(-1))
        return np.where(is_null(column), null, found) if column.null_count else found
    parts = []
    for chunk in column.chunks:
        found = np.append(to_numpy(pc.index_in(chunk.dictionary, wanted).fill_null(-1)), null)
        parts.append(found[to_numpy(chunk.indices.fill_null(len(chunk.dictionary)))])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def equal(column: pa.ChunkedArray, value: str, null: bool) -> np.ndarray:
    """Per row: the string column equals `value` (`null` where the row is null)."""
    found = index_in(column, [value], null=-2)
    return (found == 0) | (found == -2) if null else found == 0


def value_numbers(column: pa.ChunkedArray) -> np.ndarray:
    """Per row of a string column, its value's rank among the column's distinct values (-1: null), looked up
    through the dictionary of a dictionary-encoded column (as replay reads it), not row by row."""
    column = column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column)
    words = [chunk.dictionary.to_pylist() for chunk in column.chunks]
    rank = {w: i for i, w in enumerate(sorted({w for ws in words for w in ws if w is not None}))}
    parts = []
    for chunk, ws in zip(column.chunks, words):
        number = np.array([rank.get(w, -1) for w in ws] + [-1], np.int64)
        parts.append(number[to_numpy(chunk.indices.fill_null(len(ws)))])
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def first_where(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per snapshot (rows from each of `starts`), its first row where `flags` is set; len(flags) when none."""
    idx = np.where(flags, np.arange(len(flags)), len(flags))
    return np.minimum.reduceat(idx, starts) if len(idx) else np.zeros(0, np.int64)


def any_in_snapshot(flags: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per snapshot (rows from each of `starts`): some row of it has the flag."""
    return np.logical_or.reduceat(flags, starts) if len(flags) else np.zeros(0, bool)


def min_or_zero(values) -> int:
    m = pc.min(values).as_py()
    return 0 if m is None else m


def lookup(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each value's index in `ids` (sorted, distinct, holding every value): a table indexed by value when the ids
    span a small range (a few log dirs or brokers, looked up for millions of rows), else a binary search."""
    if len(ids) and int(ids[-1]) - min(int(ids[0]), 0) <= 4 * len(values) + 1024:
        base = min(int(ids[0]), 0)  # ids from 0 (broker ids, log dir numbers) index the table as they are
        table = np.zeros(int(ids[-1]) - base + 1, np.int64)
        table[ids - base] = np.arange(len(ids))
        return table[values - base if base else values]
    return np.searchsorted(ids, values)


def one_row(values: pa.Array | pa.ChunkedArray) -> pa.ListArray:
    """`values` as the one list value of a one-row column."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    return pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)


def row_values(data: bytes) -> dict[str, pa.Array]:
    """Each column's one list value of an Arrow IPC row (`one_row`'s columns), by name."""
    with pa.ipc.open_stream(pa.py_buffer(data)) as r:
        row = r.read_all()
    return {name: row.column(name).combine_chunks().flatten() for name in row.column_names}


def in_order(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """Per-row values of a table in sorted order (`order`: sorted position -> row; None: already in that order)."""
    return values if order is None else values[order]
