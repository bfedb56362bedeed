"""The record of the compiled decision as Arrow: its schema (RECORD) and its assembly from the kernel's output, one
record per decided snapshot, for both jobs (replay writes the batches as Parquet or JSON lines; the streaming job
turns them into the published JSON with core/compiled/record_json.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core.columns import PARTITION, UTC_US
from quota_pipeline.core.compiled import kernel
from quota_pipeline.core.compiled.codes import FALLBACK, NONE, SOURCE_NAMES
from quota_pipeline.core.compiled.stop_column import STOP, RowTopics, stop_column
from quota_pipeline.core.exemption import StopExemption
from quota_pipeline.core.model import OFFLINE, OFFLINE_FILLING

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
# What a pass returns per snapshot; replay/job.py adds the constant columns (schema version, decided_at, limits).
# What a task returns per snapshot; job.py adds the constant columns (schema version, decided_at, limits).
RECORD = pa.schema([
    ("cluster_id", pa.string()), ("observed_at", UTC_US), ("throttle_factor", pa.float64()), ("source", pa.string()),
    ("valid_until", UTC_US), ("status", pa.string()), ("active_brokers", pa.int32()),
    ("active_log_dirs", pa.int64()), ("missing_brokers", pa.list_(pa.int64())), ("violations", pa.int32()),
    ("worst_volume", WORST), ("min_available_ratio", pa.float64()), ("throttled_since", UTC_US),
    ("closest_volumes", pa.list_(CLOSEST)), ("predictive", PREDICTIVE), ("stop", STOP),
])


@dataclass(frozen=True)
class LogDirs:
    """A chunk's log dirs by number: each one's broker id and name."""

    broker_id: np.ndarray  # int64
    name: np.ndarray       # object (str)


def assemble(o: kernel.Out, chunk: kernel.SnapshotColumns, status: pa.Array, dirs: LogDirs, broker_ids: np.ndarray,
             parts_all: pa.Array, topics: RowTopics, cluster_id: str | None, params: kernel.Params,
             exemption: StopExemption) -> pa.RecordBatch:
    """The records (RECORD) of a chunk's snapshots from the kernel's output `o` under `params`: `status` per
    snapshot, `dirs` and `broker_ids` numbering its log dirs and brokers, `parts_all` the top partitions of the
    readings' rows, `topics` their topics (for the stop, whose topics `exemption` lets through)."""
    key_broker_id, key_name = dirs.broker_id, dirs.name
    s = len(chunk.t)
    t = pa.array(chunk.t, UTC_US)
    sources = np.array(SOURCE_NAMES, dtype=object)[o.source]
    fallback = o.source == FALLBACK
    valid_until = pa.array(o.valid_from + params.validity_us, UTC_US, mask=fallback)
    since = pa.array(o.throttled_since, UTC_US, mask=o.throttled_since == NONE)
    missing = pa.ListArray.from_arrays(pa.array(o.missing_at.astype(np.int32)),
                                       pa.array(broker_ids[o.missing], pa.int64()))
    no_worst = o.worst == NONE
    w = np.where(no_worst, len(key_broker_id), o.worst)  # no worst: a masked row, read from a padding slot
    worst = pa.StructArray.from_arrays(
        [pa.array(np.append(key_broker_id, 0)[w], pa.int64()), pa.array(np.append(key_name, "")[w], pa.string()),
         pa.array(o.worst_available, pa.int64(), mask=o.worst_available == NONE),
         pa.array(o.worst_ratio, pa.float64(), mask=np.isnan(o.worst_ratio))],
        fields=list(WORST), mask=pa.array(no_worst))
    closest = _closest(o, key_broker_id, key_name, parts_all)
    return pa.RecordBatch.from_arrays([
        pa.array(np.full(s, cluster_id, dtype=object), pa.string()), t, pa.array(o.factor),
        pa.array(sources, pa.string()), valid_until, status.cast(pa.string()),
        pa.array(o.active_brokers.astype(np.int32)), pa.array(o.active_log_dirs), missing,
        pa.array(o.violations.astype(np.int32)), worst,
        pa.array(o.min_ratio, pa.float64(), mask=np.isnan(o.min_ratio)), since, closest,
        _predictive(o, key_broker_id, key_name, params.eta_horizon_s), stop_column(o, topics, exemption),
    ], schema=RECORD)


def _predictive(o: kernel.Out, key_broker_id: np.ndarray, key_name: np.ndarray, horizon_s: float) -> pa.Array:
    """The record's `predictive` (SnapshotSummary.predictive): null where none is in force."""
    none = o.pred_key == NONE
    k = np.where(none, len(key_broker_id), o.pred_key)  # none: a masked row, read from a padding slot
    return pa.StructArray.from_arrays(
        [pa.array(np.append(key_broker_id, 0)[k], pa.int64()), pa.array(np.append(key_name, "")[k], pa.string()),
         pa.array(np.where(none, 0.0, o.pred_eta), pa.float64()),
         pa.array(np.full(len(k), horizon_s), pa.float64())],
        fields=list(PREDICTIVE), mask=pa.array(none))


def _closest(o: kernel.Out, key_broker_id: np.ndarray, key_name: np.ndarray, parts_all: pa.Array) -> pa.Array:
    """The record's closest_volumes per snapshot: the kernel's nearest entries, with their top partitions."""
    have = o.closest != NONE
    counts = have.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    k = o.closest[have]
    rows = o.c_row[have]
    # Offline entries have no partitions (an empty list, as the reference's ()), except a dir that went
    # offline after filling up: it keeps its last reading's, and its fill rate (cache.offline_reason).
    parts = parts_all.take(pa.array(rows, pa.int64(), mask=rows < 0))
    if parts.null_count:
        parts = pc.if_else(parts.is_null(), pa.scalar([], pa.list_(PARTITION)), parts)

    def opt_int(a):
        v = a[have]
        return pa.array(v, pa.int64(), mask=v == NONE)

    def opt_float(a):
        v = a[have]
        return pa.array(v, pa.float64(), mask=np.isnan(v))

    values = pa.StructArray.from_arrays(
        [pa.array(key_broker_id[k], pa.int64()), pa.array(key_name[k], pa.string()), opt_int(o.c_available),
         opt_int(o.c_total), opt_float(o.c_ratio), opt_float(o.c_headroom), opt_float(o.c_fill),
         opt_float(o.c_eta), parts, _reasons(o.c_available[have], o.c_fill[have])], fields=list(CLOSEST))
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def _reasons(available: np.ndarray, fill: np.ndarray) -> pa.Array:
    """closest_volumes' reason: null for a reading; an offline entry with a fill rate went offline after filling up."""
    offline = available == NONE
    which = pa.array(np.where(np.isnan(fill), 0, 1).astype(np.int8), mask=~offline)
    return pa.DictionaryArray.from_arrays(which, pa.array([OFFLINE, OFFLINE_FILLING])).cast(pa.string())
