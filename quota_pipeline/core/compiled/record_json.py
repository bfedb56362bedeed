"""The published JSON of the pass's records: each record of a batch (record_batch.RECORD) as the decision topic's
value, through the record's one definition (core/record.py's ThrottleDecision), which the streaming job writes."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa

from quota_pipeline.core.record import SCHEMA_VERSION, ThrottleDecision


def values(batch: pa.RecordBatch, decided_at: dt.datetime, limit: dict,
           output_key: str | None) -> list[tuple[dict, dict]]:
    """Per record of `batch`: (its columns, its published JSON object) decided at `decided_at` under `limit`, keyed
    by `output_key` (the configured cluster name; None: the cluster id)."""
    return [(r, ThrottleDecision.from_json({**r, "schema_version": SCHEMA_VERSION, "decided_at": decided_at,
                                            "cluster_id": output_key or r["cluster_id"], "limit": limit}).to_json())
            for r in batch.to_pylist()]
