"""A pass's carried state (cluster_pass.Carried) as bytes, and back: the streaming job keeps it in Spark's state store
for every cluster, written at every micro-batch.

One format is read: version VERSION, the one to_bytes writes. Any other value is refused with REFUSED, one line that
says to start from a fresh checkpoint. That is safe: a fresh state decides from the next observation on (a
violation throttles at once; only a release waits for a complete one), the brokers hold the last published decision
until its validity runs out, and the journal keeps every snapshot for replay (docs/design.md, "One compiled form,
one reference")."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from quota_pipeline.core.compiled import arrays, kernel
from quota_pipeline.core.compiled.cluster_pass import Carried

VERSION = 2
STATE_MAGIC = b"quota-pipeline state %d\n" % VERSION  # the first line of the bytes: the format's version
REFUSED = (f"the checkpoint holds a decision state that is not version {VERSION}, the only one this job reads: start "
           "from a fresh checkpoint (an empty quota.pipeline.checkpoint.path); the journal keeps every snapshot")
STATE_FIELDS = ("has", "pinned", "observed", "total", "available", "offline", "fill", "row", "hist_t", "hist_a",
                "hist_n", "registered", "decision", "eta", "env_t", "env_a", "env_n", "env_m")


class StateVersionError(ValueError):
    """A saved state in a format this job does not read (an earlier version's)."""


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
    """The state to_bytes wrote; StateVersionError (REFUSED) for any other format, ValueError for a damaged one."""
    if not data.startswith(STATE_MAGIC):
        raise StateVersionError(REFUSED)
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


def _restored(flat: dict[str, np.ndarray], nested: dict[str, pa.Array]) -> Carried:
    return Carried([kernel.State(**{f: flat[f] for f in STATE_FIELDS})], flat["key_broker"],
                   nested["key_name"].to_numpy(zero_copy_only=False).astype(object), flat["brokers"],
                   nested["p"], nested["topics"])
