"""The stateful step of the streaming job: transformWithState keyed by cluster, running the decision pass.

The whole per-cluster state (the pass's Carried: volume cache, registered brokers, current decision) is one value in
the state store, so it lives in the checkpoint: a restarted job continues where it stopped, and a throttle in force
stays in force across a restart. The value is in the one format core/compiled/state_codec.py reads. When a cluster's config was removed from the fleet,
the source sends one REMOVED row for it in the first micro-batch after the restart: its state is then
dropped and one REMOVED row (no value, never published) tells the driver, which logs it. (No timers:
a checkpoint's time mode cannot change, and existing checkpoints were made without one.)

Rows, not pandas frames, go in and out: a cluster's snapshot is one row in (its volumes packed) and its record one
out, since converting a frame each way per cluster costs more than the decision.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from itertools import groupby
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StringType, StructField, StructType

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.compiled import record_json, state_codec
from quota_pipeline.core.compiled.cluster_pass import Carried, ClusterPass
from quota_pipeline.core.compiled.frame import Origin, prepare
from quota_pipeline.streaming import packed
from quota_pipeline.streaming.source import REMOVED  # also the status of the row reporting a dropped state
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import UTC, epoch_micros

OUTPUT_SCHEMA = (
    "key string, cluster_id string, config_name string, tick long, observed_at timestamp, value string, "
    "throttle_factor double, decision_source string, status string, violations int, active_brokers int, "
    "active_log_dirs int, cached_volumes int, evicted int, volumes binary"
)
OUTPUT_COLUMNS = tuple(f.split()[0] for f in OUTPUT_SCHEMA.split(", "))
STATE_SCHEMA = StructType([StructField("json", StringType())])
STATE_CODEC = pa.Codec("zstd", compression_level=1)
MAX_STATE_BYTES = 1 << 30  # a saved state's size as it claims: more is not a state this job wrote


def save_state(carried: Carried | None, config_name: str | None) -> str:
    """The state value: JSON naming the configured cluster that last updated it (a removal reads it) and the
    columnar state (state_codec.to_bytes), compressed: a 500-log-dir cluster's 200 kB are about 11 kB, and the state
    store writes and the state's round trips to the JVM carry every cluster's state on every micro-batch (Zstandard
    at level 1: small and fast)."""
    data = state_codec.to_bytes(carried)
    return json.dumps({"config": config_name, "compressed": "zstd", "size": len(data),
                       "columns": base64.b64encode(STATE_CODEC.compress(data, asbytes=True)).decode("ascii")})


def state_columns(raw: dict) -> bytes:
    """state_codec.to_bytes of a saved state value (save_state's); StateVersionError for any other form."""
    if not isinstance(raw, dict) or raw.get("compressed") != "zstd" or not isinstance(raw.get("columns"), str):
        raise state_codec.StateVersionError(state_codec.REFUSED)
    size = raw.get("size")
    if not isinstance(size, int) or not 0 <= size <= MAX_STATE_BYTES:
        raise ValueError(f"a saved state claims {size!r} bytes; not a state this job wrote")
    return STATE_CODEC.decompress(base64.b64decode(raw["columns"]), decompressed_size=size, asbytes=True)


def load_state(text: str | None) -> Carried | None:
    """The cluster's carried state, None when it has none yet."""
    if not text:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        raise state_codec.StateVersionError(state_codec.REFUSED) from None
    return state_codec.restore(state_columns(raw))


def observed_micros(value: dt.datetime) -> int:
    """A row's observed_at in µs since the epoch; Spark hands a timestamp over in UTC, with or without its zone."""
    return epoch_micros(value if value.tzinfo else value.replace(tzinfo=UTC))


def snapshot_table(rows: Sequence[Any], volumes: list[pa.Table]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The source's snapshots (one row each; `volumes`: each one's unpacked volumes) as the pass's input frame reads
    them, a status row then one row per volume for each snapshot; each row's snapshot (the index into `rows`) and
    time (µs)."""
    n = len(rows)
    status = pa.table({
        "status": pa.array([r["status"] for r in rows], pa.string()),
        "brokers": pa.array([r["brokers"] for r in rows], pa.list_(pa.int64())),
        "fenced_brokers": pa.array([r["fenced_brokers"] for r in rows], pa.list_(pa.int64())),
        **{name: pa.nulls(n, packed.VOLUMES.field(name).type) for name in packed.VOLUMES.names},
    })
    counts = np.array([v.num_rows for v in volumes], np.int64)
    m = int(counts.sum())
    vols = pa.Table.from_batches([b for v in volumes for b in v.to_batches()], packed.VOLUMES)
    volume_rows = pa.table({
        "status": status.column("status").take(pa.array(np.repeat(np.arange(n), counts))),
        "brokers": pa.nulls(m, pa.list_(pa.int64())), "fenced_brokers": pa.nulls(m, pa.list_(pa.int64())),
        **{name: vols.column(name) for name in packed.VOLUMES.names},
    })
    # Each snapshot's status row, then its volumes, in the rows' order: slices put together, not rows gathered.
    begins = np.concatenate([[0], np.cumsum(counts)])
    table = pa.concat_tables([piece for i in range(n) for piece in (
        status.slice(i, 1), volume_rows.slice(int(begins[i]), int(counts[i])))]).combine_chunks()
    snapshot = np.repeat(np.arange(n), counts + 1)
    observed = np.array([observed_micros(r["observed_at"]) for r in rows], np.int64)
    return table, snapshot, observed[snapshot]


class DecisionProcessor(StatefulProcessor):
    """Keyed by cluster_id; `settings` and `output_keys` are per configured cluster (config_name)."""

    def __init__(self, settings: dict[str, Settings], output_keys: dict[str, str | None],
                 clock: Clock = SYSTEM) -> None:
        self.settings = settings
        self.output_keys = output_keys
        self.clock = clock

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("cluster", STATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        given = [r.asDict() for r in rows]
        snapshots = [r for r in given if r["status"] != REMOVED]
        if len(snapshots) < len(given):
            yield from self._remove(key, [r for r in given if r["status"] == REMOVED], snapshots)
            if not snapshots:
                return
        stored = self.state.get()  # None when there is none (one round trip to the JVM, not two)
        carried = load_state(stored[0] if stored else None)
        out: list[Row] = []
        volumes = [packed.unpack(r["volumes"]) for r in snapshots]
        table, snapshot, t = snapshot_table(snapshots, volumes)
        # Runs of snapshots of one configured cluster, in time order (almost always one run: one config per id).
        names = [str(r["config_name"]) for r in snapshots]
        order = sorted(range(len(snapshots)), key=lambda i: (observed_micros(snapshots[i]["observed_at"]), names[i]))
        runs = [list(run) for _, run in groupby(order, key=names.__getitem__)]
        last_name = None
        for run in runs:
            config_name = names[run[0]]
            settings = self.settings[config_name]
            mask = None if len(runs) == 1 else np.isin(snapshot, run)
            chunk = prepare(table, t, Origin.of_snapshots(snapshot)) if mask is None else \
                prepare(table.filter(pa.array(mask)), t[mask], Origin.of_snapshots(snapshot[mask]))
            decision = ClusterPass(key[0], settings, carried=carried)
            batch = decision.decide(chunk)
            carried = decision.carried
            if batch is None:
                continue
            out.extend(self._rows(batch, decision.last, [snapshots[i]["tick"] for i in run],
                                  [snapshots[i]["volumes"] for i in run], settings, config_name))
            last_name = config_name
        self.state.update((save_state(carried, last_name),))
        yield from out

    def _rows(self, batch: pa.RecordBatch, o: Any, ticks: list[int], volumes: list[bytes | None], settings: Settings,
              config_name: str) -> list[Row]:
        """The job's output rows for the records of one run of snapshots, in time order; each row's volumes as the
        source packed them (the driver's metrics read them)."""
        out = []
        published = record_json.values(batch, self.clock.now(), settings.limits.to_json(),
                                       self.output_keys.get(config_name))
        for i, ((r, value), tick, vols) in enumerate(zip(published, ticks, volumes)):
            out.append(Row(key=value["cluster_id"], cluster_id=r["cluster_id"], config_name=config_name, tick=int(tick),
                      observed_at=r["observed_at"], value=json.dumps(value), throttle_factor=r["throttle_factor"],
                      decision_source=r["source"], status=r["status"], violations=r["violations"],
                      active_brokers=r["active_brokers"], active_log_dirs=r["active_log_dirs"],
                      cached_volumes=int(o.cached[i]), evicted=int(o.evicted[i]), volumes=vols))
        return out

    def _remove(self, key: Any, markers: list[dict], others: list[dict]) -> Iterator[Row]:
        """Drop the state of a cluster whose config left the fleet, unless a configured cluster still decides
        with it: one observing the same cluster id, in this batch or as the state's last writer."""
        if not self.state.exists() or others:
            return
        last_writer = json.loads(self.state.get()[0]).get("config")
        if last_writer in self.settings or any(m["config_name"] in self.settings for m in markers):
            return
        self.state.clear()
        row = dict.fromkeys(OUTPUT_COLUMNS, None)
        row.update(key=key[0], cluster_id=key[0], config_name=str(markers[0]["config_name"]), status=REMOVED)
        yield Row(**row)

    def close(self) -> None:
        pass
