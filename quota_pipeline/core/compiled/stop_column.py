"""The record's `stop` as an Arrow column: per stopped snapshot, the topics its violating log dirs hold, taken from the
readings' rows only where a stop needs them, and each distinct combination of lists united once."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core.columns import TOPICS
from quota_pipeline.core.compiled import kernel
from quota_pipeline.core.compiled.codes import FALLBACK
from quota_pipeline.core.compiled.rows import Rows
from quota_pipeline.core.exemption import StopExemption
from quota_pipeline.core.model import STOP_CLUSTER, STOP_TOPICS, STOP_TOPICS_BUDGET, stop_json_bytes

STOP = pa.struct([("scope", pa.string()), ("topics", TOPICS)])


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
    listed = stopped & (o.source != FALLBACK) & (counts > 0) & ~unknown
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
