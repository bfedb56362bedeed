"""A streaming state value rewritten as earlier versions saved it, for the tests that carry on from one."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pyarrow as pa

from quota_pipeline.core.cluster_pass import STATE_FIELDS, ClusterPass
from quota_pipeline.streaming.processor import _ANY_SETTINGS, state_columns


def as_npz(value: str, dropped: tuple[str, ...] = (), topics: bool = True) -> str:
    """`value` (processor.save_state's) as the npz form before the Arrow one, uncompressed as it was then, without
    the state arrays in `dropped` and, unless `topics`, without the cached readings' topics."""
    saved = json.loads(value)
    columns = ClusterPass("x", _ANY_SETTINGS).restore(state_columns(saved))
    st = columns.states[0]
    assert set(dropped) <= set(STATE_FIELDS)
    kept = {"p": columns.partitions, **({"topics": columns.topics} if topics else {})}
    sink = pa.BufferOutputStream()
    table = pa.table(kept)
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    out = io.BytesIO()
    np.savez(out, **{f: getattr(st, f) for f in STATE_FIELDS if f not in dropped},
             key_broker=np.asarray(columns.keys[0], np.int64), key_name=np.array(list(columns.keys[1]), dtype=str),
             brokers=np.asarray(columns.brokers, np.int64),
             partitions=np.frombuffer(sink.getvalue().to_pybytes(), np.uint8))
    saved["columns"] = base64.b64encode(out.getvalue()).decode("ascii")
    saved.pop("compressed", None)
    return json.dumps(saved)
