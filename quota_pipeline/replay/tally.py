"""Replay's bookkeeping around the decision pass: where each journal row came from (its file, offset and line), the
snapshots rejected and why, and per setting what was decided at each snapshot, with the bytes written and the least
headroom, for the summary and the sweep table (replay/sweep.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Sequence

import numba
import numpy as np
import pyarrow as pa

from quota_pipeline.core.compiled import kernel, numba_cache, rule_codes
from quota_pipeline.core.compiled.cluster_pass import ClusterPass
from quota_pipeline.core.compiled.codes import BYTES, FALLBACK
from quota_pipeline.core.compiled.frame import Origin, Prepared
from quota_pipeline.core.compiled.frame import prepare as prepare_rows
from quota_pipeline.core.settings import Settings

numba_cache.install()  # before the functions below are compiled

# Where each row came from (replay/cluster_files.py: staged JSONL's file and line, or the Parquet file's row).
ORIGIN = ("_file", "_offset", "_line")


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


def journal_origin(table: pa.Table) -> Origin:
    """The ORIGIN columns of a chunk's rows as numbers: each file's rank among the chunk's file names (the column
    is dictionary-encoded by cluster_files.read, so no string per row), the offset and the line."""
    files = table.column("_file").combine_chunks()
    names = files.dictionary.to_pylist()
    rank = np.argsort(np.argsort(np.array(names, dtype=object)))  # file names in sorted order
    file_rank = rank[files.indices.to_numpy(zero_copy_only=False)] if len(names) else np.zeros(0, np.int64)
    return Origin(file_rank.astype(np.int64, copy=False),
                  table.column("_offset").to_numpy().astype(np.int64, copy=False),
                  table.column("_line").to_numpy().astype(np.int64, copy=False))


def prepare(table: pa.Table, t: np.ndarray) -> Prepared:
    """A chunk of journal rows (this cluster's, with ORIGIN columns; `t`: their times) as the pass decides it: a
    snapshot is the rows of one (time, file)."""
    # Dictionary columns read from several row groups share one dictionary, so rows of any of them compare and
    # take alike.
    table = table.unify_dictionaries()
    return prepare_rows(table, t, journal_origin(table))


class ReplayPass(ClusterPass):
    """The decision pass of one cluster over journal files, keeping replay's Outcome: its rejections (by file and
    line) and, per setting, what it decided."""

    def __init__(self, cluster_id: str | None, settings: Settings, sweep: Sequence[Settings] = ()):
        super().__init__(cluster_id, settings, sweep)
        self.outcome = Outcome(decided=[[] for _ in self.params])
        self.used = np.zeros(0)  # per carried log dir: the last used bytes read, NaN: none

    def passed_over(self, c: Prepared) -> None:
        table, starts = c.table, c.starts
        for j in np.flatnonzero(c.repeat):
            first = c.row(starts[c.vs[c.first_of_run[j]]])
            self._reject_snapshot(table, c.row(starts[c.vs[j]]), rule_codes.DUPLICATE, first=first)
        for s in np.flatnonzero(~c.valid):
            self._reject_snapshot(table, c.row(starts[s]), rule_codes.RULE_REASONS[c.code[s]])

    def decided(self, columns: kernel.SnapshotColumns, outs: list[kernel.Out], carried_key_of: np.ndarray) -> None:
        self.outcome.snapshots += len(columns.t)
        self.outcome.t.append(columns.t)
        self.outcome.failed.append(~columns.ok)
        filled, self.used = filled_bytes(columns, self.used, carried_key_of, len(columns.key_broker))
        self.outcome.filled.append(filled)
        for decided, o, p in zip(self.outcome.decided, outs, self.params):
            decided.append((o.factor, o.source == FALLBACK, o.violations, o.min_ratio,
                            least_headroom(columns, p)))

    def reject_rows(self, table: pa.Table, code: int) -> None:
        """Rows rejected before they are grouped: one rejection per (file, observed_at) at its first row."""
        seen = set()
        for r in table.select(["_file", "_offset", "_line", "cluster_id", "observed_at", "status", "brokers",
                               "fenced_brokers"]).to_pylist():
            if (r["_file"], r["observed_at"]) in seen:
                continue
            seen.add((r["_file"], r["observed_at"]))
            self.outcome.rejected.append(_rejection(r, rule_codes.RULE_REASONS[code]))

    def _reject_snapshot(self, table: pa.Table, row: int, reason: str, first: int | None = None) -> None:
        r = table.slice(row, 1).select(["_file", "_offset", "_line", "cluster_id", "observed_at", "status",
                                        "brokers", "fenced_brokers"]).to_pylist()[0]
        at = None
        if first is not None:
            f = table.slice(first, 1).select(["_file", "_offset", "_line"]).to_pylist()[0]
            at = {"file": f["_file"], "offset": f["_offset"], "line": f["_line"]}
        self.outcome.rejected.append(_rejection(r, reason, at))


def filled_bytes(columns: kernel.SnapshotColumns, used: np.ndarray, carried_key_of: np.ndarray,
                 keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Per snapshot of `columns`, the bytes written to its log dirs since their previous readings: the sum over log
    dirs read of the growth of used bytes (total - available) since the dir's last reading, where it grew. An
    interval holding a retention pass counts only its net growth, so this is a lower bound of what was written.
    `used`: the carried log dirs' last used bytes (NaN: none), renumbered by `carried_key_of`; returned for the
    next chunk, numbered as this chunk's log dirs."""
    last = np.full(keys, np.nan)
    last[carried_key_of] = used
    return _filled(columns.key, columns.total, columns.available, columns.offline, columns.rows_at, last), last


def least_headroom(columns: kernel.SnapshotColumns, p: kernel.Params) -> np.ndarray:
    """Per snapshot of `columns`, the least bytes any log dir it read had above `p`'s hard limit (negative: past
    it); NaN when it read none."""
    return _least_headroom(columns.total, columns.available, columns.offline, columns.rows_at, p.hard_kind,
                           float(p.hard_value))


@numba.njit(cache=True, nogil=True)
def _filled(key: np.ndarray, total: np.ndarray, available: np.ndarray, offline: np.ndarray, rows_at: np.ndarray,
           last: np.ndarray) -> np.ndarray:
    """Per snapshot, the bytes its log dirs grew by since their previous readings (replay's deferred bytes): the
    readings of snapshot i are rows rows_at[i] .. rows_at[i + 1], in time order, each of log dir key[r] with
    total[r] - available[r] bytes used unless offline[r]; `last` (per log dir, NaN: none yet) is updated in place.
    Whole bytes as doubles: the sums are exact in any order."""
    out = np.zeros(len(rows_at) - 1)
    for i in range(len(rows_at) - 1):
        for r in range(rows_at[i], rows_at[i + 1]):
            if offline[r]:
                continue
            used = float(total[r] - available[r])
            before = last[key[r]]
            if not np.isnan(before) and used > before:
                out[i] += used - before
            last[key[r]] = used
    return out


@numba.njit(cache=True, nogil=True)
def _least_headroom(total: np.ndarray, available: np.ndarray, offline: np.ndarray, rows_at: np.ndarray,
                   hard_kind: int, hard_value: float) -> np.ndarray:
    """Per snapshot, the least bytes any log dir it read had above the hard limit (negative: past it), NaN when it
    read none online: snapshot i's readings are rows rows_at[i] .. rows_at[i + 1]."""
    out = np.full(len(rows_at) - 1, np.nan)
    for i in range(len(rows_at) - 1):
        for r in range(rows_at[i], rows_at[i + 1]):
            if offline[r]:
                continue
            head = float(available[r]) - (hard_value if hard_kind == BYTES else float(total[r]) * hard_value)
            if np.isnan(out[i]) or head < out[i]:
                out[i] = head
    return out


def _rejection(r: dict, reason: str, first: dict | None = None) -> dict:
    text = json.dumps({k: r[k] for k in ("cluster_id", "observed_at", "status", "brokers", "fenced_brokers")},
                      separators=(",", ":"))
    return {"file": r["_file"], "offset": r["_offset"], "line": r["_line"], "reason": reason, "text": text,
            "first": first}
