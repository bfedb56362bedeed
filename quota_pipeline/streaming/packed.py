"""A snapshot's volumes packed as one Arrow IPC value: the source hands the stateful step one row per snapshot.

Spark's cost per micro-batch grows with its rows, not their size: a row per volume (50,000 at 100 clusters of 500
log dirs) went through the Python source's serialisation, the shuffle and the conversion to pandas, nested lists
turned into Python objects one by one. As one binary value per snapshot Spark only moves bytes, and the stateful
step reads them straight into the cluster pass's Arrow columns.
"""
from __future__ import annotations

import functools
from operator import attrgetter
from typing import Iterable

import pyarrow as pa

from quota_pipeline.core.columns import TYPES
from quota_pipeline.core.model import Volume

# The cluster pass's volume columns, as it reads them. top_partitions: null when the dir reported none; topics: null
# when not known, an empty list for a dir holding no partition.
VOLUMES = pa.schema([(name, TYPES[name]) for name in (
    "broker_id", "log_dir", "total_bytes", "available_bytes", "error", "top_partitions", "topics")])


@functools.cache
def _empty() -> pa.Table:
    """Made on first use: an empty table makes pyarrow import pandas, which the source's planning processes need
    not pay for."""
    return VOLUMES.empty_table()


def pack(volumes: Iterable[Volume]) -> bytes:
    """The volumes as an Arrow IPC stream of VOLUMES."""
    vs = list(volumes)
    parts = [[p.to_json() for p in v.top_partitions] or None for v in vs] if any(
        v.top_partitions for v in vs) else None
    # Built array by array (pa.table of a dict would import pandas into the polling worker); topics go as the tuples
    # they are, None where not known.
    arrays = {name: pa.array(list(map(attrgetter(name), vs)), VOLUMES.field(name).type)
              for name in VOLUMES.names if name != "top_partitions"}
    arrays["top_partitions"] = (pa.nulls(len(vs), VOLUMES.field("top_partitions").type) if parts is None else
                                pa.array(parts, VOLUMES.field("top_partitions").type))
    batch = pa.RecordBatch.from_arrays([arrays[name] for name in VOLUMES.names], schema=VOLUMES)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, VOLUMES) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def unpack(value: bytes | None) -> pa.Table:
    """The VOLUMES table of a packed value (no rows for None: a failed poll's or a removal's row). Anything else
    than this module's own stream is refused: the value crossed Spark, not the outside, but is read as data."""
    if value is None:
        return _empty()
    table = pa.ipc.open_stream(pa.py_buffer(value)).read_all()
    if not table.schema.equals(VOLUMES):
        raise ValueError(f"a packed snapshot holds columns {table.schema.names}, not the source's {VOLUMES.names}")
    return table
