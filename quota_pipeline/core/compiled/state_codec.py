"""A pass's carried state (cluster_pass.Carried) as bytes, and back: the streaming job keeps it in Spark's state store
for every cluster, written at every micro-batch."""
from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa

from quota_pipeline.core.columns import TOPICS
from quota_pipeline.core.compiled import arrays, kernel
from quota_pipeline.core.compiled.cluster_pass import Carried

STATE_MAGIC = b"quota-pipeline state 2\n"  # to_bytes' form; earlier forms: an Arrow IPC stream, an npz archive
STATE_FIELDS = ("has", "pinned", "observed", "total", "available", "offline", "fill", "row", "hist_t", "hist_a",
                "hist_n", "registered", "decision", "eta", "env_t", "env_a", "env_n", "env_m")


def to_bytes(carried: Carried | None) -> bytes:
    """The first setting's state, its log dirs and brokers (STATE_MAGIC, a header line naming each array's type and
    shape, the arrays' bytes one after another), then the log dirs' names and the cached readings' top partitions and
    topics (an Arrow IPC row, each a list value). Raw bytes: written for every cluster at every micro-batch, so the
    arrays are not converted to Arrow."""
    carried = carried or Carried.empty(1)
    st = carried.states[0]
    fields = {f: np.ascontiguousarray(getattr(st, f)) for f in STATE_FIELDS}
    fields.update(key_broker=np.ascontiguousarray(carried.key_broker, np.int64),
                  brokers=np.ascontiguousarray(carried.brokers, np.int64))
    header = json.dumps({name: [a.dtype.str, list(a.shape)] for name, a in fields.items()},
                        separators=(",", ":")).encode("ascii")
    batch = pa.record_batch([arrays.one_row(pa.array(list(carried.key_name), pa.string())),
                             arrays.one_row(carried.partitions), arrays.one_row(carried.topics)],
                            names=["key_name", "p", "topics"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return b"".join([STATE_MAGIC, header, b"\n", *(a.tobytes() for a in fields.values()),
                     sink.getvalue().to_pybytes()])


def restore(data: bytes) -> Carried:
    """The state to_bytes wrote (or, from a checkpoint of an earlier version, the Arrow row or the npz it wrote)."""
    if data[:2] == b"PK":
        return _restore_npz(data)
    if not data.startswith(STATE_MAGIC):
        return _restore_arrow(data)
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
    return _restored(flat, arrays.row_values(data[at:]))


def _restore_arrow(data: bytes) -> Carried:
    """The Arrow row an earlier version's to_bytes wrote: every array a list value."""
    fields = arrays.row_values(data)
    flat = {name: np.array(fields[name].to_numpy(zero_copy_only=False))
            for name in (*STATE_FIELDS, "key_broker", "brokers")}
    keys = len(flat["key_broker"])
    widths = {"hist_t": kernel.FILL_READINGS, "hist_a": kernel.FILL_READINGS, "env_t": kernel.ETA_BUCKETS,
              "env_a": kernel.ETA_BUCKETS, "env_m": kernel.ETA_BUCKETS}
    for name, width in widths.items():
        flat[name] = flat[name].reshape(keys, width)
    return _restored(flat, fields)


def _restored(flat: dict[str, np.ndarray], nested: dict[str, pa.Array]) -> Carried:
    return Carried([kernel.State(**{f: flat[f] for f in STATE_FIELDS})], flat["key_broker"],
                   nested["key_name"].to_numpy(zero_copy_only=False).astype(object), flat["brokers"],
                   nested["p"], nested["topics"])


def _restore_npz(data: bytes) -> Carried:
    z = np.load(io.BytesIO(data), allow_pickle=False)
    # A checkpoint from before the predictive step lacks its fields: State starts them empty (and one from
    # before the buckets' tops, env_m, with tops unknown: they never pass for a clean-up).
    state = kernel.State(**{f: z[f] for f in STATE_FIELDS if f in z.files})
    state.pinned = state.pinned.astype(np.int8)  # bool in checkpoints before fenced pins
    with pa.ipc.open_stream(pa.py_buffer(z["partitions"].tobytes())) as r:
        saved = r.read_all()
    partitions = saved.column("p").combine_chunks()
    # Saved before topics were kept: the cached readings' topics are not known (a stop there is the cluster's).
    topics = saved.column("topics").combine_chunks() if "topics" in saved.column_names else \
        pa.nulls(len(partitions), TOPICS)
    return Carried([state], z["key_broker"], z["key_name"].astype(object), z["brokers"], partitions, topics)
