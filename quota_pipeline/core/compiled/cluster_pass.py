"""The decision pass of one cluster: its prepared chunks (core/compiled/frame.py) through the kernel, chunk after chunk.

Each chunk's log dirs and brokers are numbered afresh (log dirs in (broker_id, log_dir) order, brokers in id order),
the carried state renumbered to match, the kernel run under the pass's settings (and any sweep settings), and the
records assembled (core/compiled/record_batch.py). Both jobs run it: replay over the time chunks of a journal's files
(replay/cluster_files.py, its bookkeeping in replay/tally.py), the streaming job over a micro-batch's snapshots
(streaming/processor.py, the carried state kept in Spark's state store by core/compiled/state_codec.py). It reads no
files and knows no Spark.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core.columns import PARTITION, TOPICS
from quota_pipeline.core.compiled import arrays, kernel, record_batch
from quota_pipeline.core.compiled.frame import Prepared
from quota_pipeline.core.compiled.stop_column import RowTopics
from quota_pipeline.core.settings import Settings


@dataclass
class Carried:
    """What one chunk hands the next: the kernel's state per setting, numbered by the carried log dirs (their broker
    ids and names) and brokers, and the cached readings' top partitions and topics (the states' `row` index them)."""

    states: list[kernel.State]
    key_broker: np.ndarray   # int64 per log dir
    key_name: np.ndarray     # object (str) per log dir
    brokers: np.ndarray      # int64 broker ids
    partitions: pa.Array     # list<PARTITION> per cached reading
    topics: pa.Array         # TOPICS per cached reading (null: not known)

    @classmethod
    def empty(cls, settings: int) -> "Carried":
        return cls([kernel.State.empty(0, 0) for _ in range(settings)], np.zeros(0, np.int64), np.zeros(0, object),
                   np.zeros(0, np.int64), pa.array([], pa.list_(PARTITION)), pa.array([], TOPICS))


class ClusterPass:
    """Decisions of one cluster (None: the rows without a cluster id), chunk by chunk, under `settings` and any
    `sweep` settings, continuing from `carried` (None: a cluster seen for the first time)."""

    def __init__(self, cluster_id: str | None, settings: Settings, sweep: Sequence[Settings] = (),
                 carried: Carried | None = None):
        self.cluster_id = cluster_id
        self.settings = settings
        self.params = [kernel.Params.of(settings)] + [kernel.Params.of(s) for s in sweep]
        if carried is not None and len(carried.states) != len(self.params):
            raise ValueError(f"a carried state of {len(carried.states)} settings for a pass of {len(self.params)}")
        self.carried = carried
        self.last: kernel.Out | None = None  # the kernel's output for the last chunk, under `settings`

    def mine(self, table: pa.Table) -> np.ndarray:
        """Per row: it belongs to this cluster (None: no cluster id, or an empty one)."""
        c = table.column("cluster_id")
        if self.cluster_id is None:
            return arrays.equal(c, "", null=True)
        return arrays.equal(c, self.cluster_id, null=False)

    def decide(self, chunk: Prepared) -> pa.RecordBatch | None:
        """The records of a prepared chunk of this cluster's rows, continuing from the carried state (None: it keeps
        no snapshot). `self.last` then holds the kernel's output under the pass's settings."""
        self.passed_over(chunk)
        if chunk.readings is None:
            return None
        return self._decide(chunk)

    def passed_over(self, chunk: Prepared) -> None:
        """Called with each chunk before its kept snapshots are decided: replay reports the snapshots it does not
        keep (a broken rule, a duplicate) from here."""

    def decided(self, columns: kernel.SnapshotColumns, outs: list[kernel.Out], carried_key_of: np.ndarray) -> None:
        """Called with each chunk's kernel input and outputs (one per setting; `carried_key_of`: each carried log
        dir's number in this chunk): replay's bookkeeping of a sweep is kept from here."""

    def _decide(self, c: Prepared) -> pa.RecordBatch:
        """The kept snapshots of a prepared chunk through the kernel under every setting; their records."""
        r = c.readings
        assert r is not None
        before = self.carried or Carried.empty(len(self.params))
        key_broker_id, key_name, carried_key_of, row_key = self._log_dirs(before, r.dirs, r.row_b)
        broker_ids, lists, key_broker, carried_broker_of = self._brokers(before, key_broker_id, r.brokers, r.fenced)
        # Readings this chunk: their rows in a partitions table that begins with the carried readings'.
        carried = len(before.partitions)
        parts_all = pa.concat_arrays([before.partitions, r.partitions]) if len(r.vrows) or carried else \
            before.partitions
        # Their topics, taken only for the rows a stop or the carried state needs (a row of a reading a stop refuses).
        topics = RowTopics(before.topics, c.table.column("topics"), r.vrows)
        columns = kernel.SnapshotColumns(
            t=r.t, ok=r.ok, brokers_at=lists[0], brokers=lists[1], fenced_at=lists[2], fenced=lists[3],
            rows_at=r.rows_at, key=row_key.astype(np.int64), total=r.total, available=r.available, offline=r.offline,
            row=np.arange(carried, carried + len(r.vrows), dtype=np.int64), key_broker=key_broker.astype(np.int64))
        states = [s.remap(carried_key_of, len(key_broker_id), carried_broker_of, len(broker_ids))
                  for s in before.states]
        outs = [kernel.run(state, columns, p) for state, p in zip(states, self.params)]
        self.last = outs[0]
        self.decided(columns, outs, carried_key_of)
        batch = record_batch.assemble(outs[0], columns, r.status, record_batch.LogDirs(key_broker_id, key_name),
                                      broker_ids, parts_all, topics, self.cluster_id, self.params[0],
                                      self.settings.exemption)
        self.carried = _carry(states, key_broker_id, key_name, broker_ids, parts_all, topics)
        return batch

    @staticmethod
    def _log_dirs(before: Carried, dirs: pa.DictionaryArray, row_b: np.ndarray) -> tuple[np.ndarray, ...]:
        """Log dirs numbered in (broker_id, log_dir) order, the carried ones included: (broker id and name of each
        number, each carried log dir's new number, each volume row's number). `dirs`, `row_b`: the volume rows'
        log dirs (dictionary-encoded) and broker ids."""
        carried_broker, carried_name = before.key_broker, before.key_name
        names = np.concatenate([carried_name, np.asarray(dirs.dictionary.to_pylist(), dtype=object)])
        uniq_names = np.array(sorted(set(names.tolist())), dtype=object)
        name_rank = {v: i for i, v in enumerate(uniq_names)}
        rank_of_dict = np.array([name_rank[v] for v in dirs.dictionary.to_pylist()], dtype=np.int64)
        row_d = rank_of_dict[dirs.indices.to_numpy(zero_copy_only=False)] if len(row_b) else np.zeros(0, np.int64)
        carried_d = np.array([name_rank[v] for v in carried_name], dtype=np.int64)
        all_b = np.concatenate([carried_broker, row_b])
        all_d = np.concatenate([carried_d, row_d])
        width = len(uniq_names) + 1
        composite = all_b * width + all_d if len(all_b) else np.zeros(0, np.int64)
        # A few distinct log dirs over millions of rows: hashed, then each row looked up among them, instead of a
        # sort of every row (np.unique).
        key_ids = np.sort(pc.unique(pa.array(composite, pa.int64())).to_numpy())
        key_of = arrays.lookup(key_ids, composite)
        key_name = uniq_names[key_ids % width] if len(key_ids) else np.zeros(0, object)
        return key_ids // width, key_name, key_of[:len(carried_broker)], key_of[len(carried_broker):]

    @staticmethod
    def _brokers(before: Carried, key_broker_id: np.ndarray, brokers: pa.Array, fenced: pa.Array) -> tuple:
        """Brokers numbered in id order: those of the log dirs, the lists, and the carried registered ones.
        (broker ids, (offsets, numbers) of the brokers lists and of the fenced ones, each log dir's broker number,
        each carried broker's new number)."""
        b_vals, b_at = arrays.flat(brokers)
        f_vals, f_at = arrays.flat(fenced)
        every = np.concatenate([key_broker_id, b_vals, f_vals, before.brokers])
        broker_ids = np.sort(pc.unique(pa.array(every, pa.int64())).to_numpy()) if len(every) else every
        inverse = arrays.lookup(broker_ids, every)
        k_n, b_n, f_n = len(key_broker_id), len(b_vals), len(f_vals)
        lists = (b_at, inverse[k_n:k_n + b_n], f_at, inverse[k_n + b_n:k_n + b_n + f_n])
        return broker_ids, lists, inverse[:k_n], inverse[k_n + b_n + f_n:]


def _carry(states: list[kernel.State], key_broker_id: np.ndarray, key_name: np.ndarray, broker_ids: np.ndarray,
           parts_all: pa.Array, topics: RowTopics) -> Carried:
    """What the next chunk needs to renumber the states: log dirs, brokers, cached readings' partitions and topics.
    Every state's cached rows (the sweep's too) move to the front of the next partitions table."""
    rows = np.unique(np.concatenate([s.row[s.row >= 0] for s in states]))
    partitions = parts_all.take(pa.array(rows)) if len(rows) else pa.array([], pa.list_(PARTITION))
    for s in states:
        have = s.row >= 0
        s.row[have] = np.searchsorted(rows, s.row[have])
    return Carried(states, key_broker_id, key_name, broker_ids, partitions, topics.of(rows))
