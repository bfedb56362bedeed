"""The Arrow types of a snapshot's rows as the cluster pass reads them, apart from the pass itself: the streaming
source packs volumes in them, and the processes that plan its reads then import pyarrow, not numba and pandas."""
from __future__ import annotations

import pyarrow as pa

PARTITION = pa.struct([("topic", pa.string()), ("partition", pa.int32()), ("size_bytes", pa.int64())])
TOPICS = pa.list_(pa.string())
UTC_US = pa.timestamp("us", tz="UTC")  # observed_at and the record's times
COLUMNS = ("cluster_id", "observed_at", "observed_us", "status", "brokers", "fenced_brokers", "broker_id", "log_dir",
           "total_bytes", "available_bytes", "error", "top_partitions", "topics")
TYPES = {"cluster_id": pa.string(), "observed_at": pa.string(), "observed_us": pa.int64(), "status": pa.string(),
         "brokers": pa.list_(pa.int64()), "fenced_brokers": pa.list_(pa.int64()), "broker_id": pa.int64(),
         "log_dir": pa.string(), "total_bytes": pa.int64(), "available_bytes": pa.int64(), "error": pa.string(),
         "top_partitions": pa.list_(PARTITION), "topics": TOPICS}
