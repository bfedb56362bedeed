"""Which state group holds a cluster's decision state: a few groups per job (one per state partition), not one per cluster.

transformWithStateInPandas pays a fixed cost per group and micro-batch (the implicit key, the state server's
round trips, a pandas frame in and out) that grew with the fleet larger than the decisions themselves. The job
groups the clusters into one shard per state partition; a shard's clusters keep their states side by side in a
map state keyed by cluster id. The shard count is written beside the query's checkpoint when it is created and
read back on every start: a cluster's shard must never change while its state lives in the checkpoint, or a
restart would decide without the throttle in force. A checkpoint made before shards keeps one group per cluster.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import mmh3

from quota_pipeline.streaming import checkpoint_files, s3a

LAYOUT_FILE = "state-layout.json"
SEED = 42  # Spark's HashPartitioning: Murmur3 with seed 42 over the grouping key


class LayoutError(ValueError):
    """The layout file beside the checkpoint is not one this job wrote; the message says what to do."""


@dataclass(frozen=True)
class Layout:
    """`shards`: the number of state groups, one per state partition; None for one group per cluster (a
    checkpoint made before shards)."""

    shards: int | None

    @property
    def grouping(self) -> str:
        return "cluster_id" if self.shards is None else "shard"


def keys(shards: int) -> list[int]:
    """One grouping value per state partition, the smallest that Spark hashes onto it: shard i runs in partition i,
    so the shards are spread over the tasks instead of two landing in one."""
    found: dict[int, int] = {}
    k = 0
    while len(found) < shards:
        found.setdefault(mmh3.hash(struct.pack("<i", k), SEED) % shards, k)
        k += 1
    return [found[p] for p in range(shards)]


def column(shards: int):
    """The shard column: the cluster id hashed onto one of the shards' keys (Spark SQL, so the source's rows need
    no Python pass)."""
    from pyspark.sql import functions as F

    which = F.pmod(F.hash(F.col("cluster_id")), F.lit(shards)) + 1
    return F.element_at(F.array(*[F.lit(k) for k in keys(shards)]), which).alias("shard")


def layout(checkpoint_path: str, shards: int) -> Layout:
    """The checkpoint's layout; a new checkpoint is given `shards` (written before the query starts). A checkpoint
    the driver does not write files beside (a file: or HDFS URI) keeps one group per cluster."""
    plain = "://" not in checkpoint_path and not checkpoint_path.startswith("file:")
    if not (plain or s3a.is_s3a(checkpoint_path)):
        return Layout(None)
    text = checkpoint_files.read_text(checkpoint_path, LAYOUT_FILE)
    if text is not None:
        try:
            got = json.loads(text)["shards"]
        except (ValueError, KeyError, TypeError):
            got = None
        if not isinstance(got, int) or isinstance(got, bool) or got < 1:
            raise LayoutError(f"error: {checkpoint_files.join(checkpoint_path, LAYOUT_FILE)} is not a state layout this job "
                             "wrote; restore it from a backup of the checkpoint, or start a new checkpoint")
        return Layout(got)
    if checkpoint_files.names(checkpoint_files.join(checkpoint_files.query_dir(checkpoint_path), "offsets")):
        return Layout(None)
    checkpoint_files.write_text(checkpoint_path, LAYOUT_FILE, json.dumps({"shards": shards}) + "\n")
    return Layout(shards)
