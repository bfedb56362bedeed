"""A streaming state value rewritten as earlier versions saved it, for the tests that carry on from one."""
from __future__ import annotations

import base64
import io
import json

import numpy as np
import pyarrow as pa

from quota_pipeline.core.compiled import state_codec
from quota_pipeline.core.compiled.arrays import one_row as _one_row
from quota_pipeline.core.compiled.state_codec import STATE_FIELDS
from quota_pipeline.streaming.processor import STATE_CODEC, state_columns


def as_arrow_row(value: str) -> str:
    """`value` (processor.save_state's) as the Arrow form before the raw arrays: one IPC row, every array a list
    value (2-D ones row-major), compressed as it was then."""
    saved = json.loads(value)
    columns = state_codec.restore(state_columns(saved))
    st = columns.states[0]
    arrays = {f: getattr(st, f) for f in STATE_FIELDS}
    arrays.update(key_broker=np.asarray(columns.key_broker, np.int64), brokers=np.asarray(columns.brokers, np.int64))
    row = {name: _one_row(pa.array(a.reshape(-1))) for name, a in arrays.items()}
    row.update(key_name=_one_row(pa.array(list(columns.key_name), pa.string())), p=_one_row(columns.partitions),
               topics=_one_row(columns.topics))
    batch = pa.record_batch(list(row.values()), names=list(row))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    saved.update(compressed="zstd", size=len(data),
                 columns=base64.b64encode(STATE_CODEC.compress(data, asbytes=True)).decode("ascii"))
    return json.dumps(saved)


def as_npz(value: str, dropped: tuple[str, ...] = (), topics: bool = True) -> str:
    """`value` (processor.save_state's) as the npz form before the Arrow one, uncompressed as it was then, without
    the state arrays in `dropped` and, unless `topics`, without the cached readings' topics."""
    saved = json.loads(value)
    columns = state_codec.restore(state_columns(saved))
    st = columns.states[0]
    assert set(dropped) <= set(STATE_FIELDS)
    kept = {"p": columns.partitions, **({"topics": columns.topics} if topics else {})}
    sink = pa.BufferOutputStream()
    table = pa.table(kept)
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    out = io.BytesIO()
    np.savez(out, **{f: getattr(st, f) for f in STATE_FIELDS if f not in dropped},
             key_broker=np.asarray(columns.key_broker, np.int64), key_name=np.array(list(columns.key_name), dtype=str),
             brokers=np.asarray(columns.brokers, np.int64),
             partitions=np.frombuffer(sink.getvalue().to_pybytes(), np.uint8))
    saved["columns"] = base64.b64encode(out.getvalue()).decode("ascii")
    saved.pop("compressed", None)
    return json.dumps(saved)
