"""The stateful step of the streaming job: transformWithStateInPandas keyed by cluster, running core.decision.step.

The whole per-cluster state (volume cache, registered brokers, current decision) is one value in
the state store, so it lives in the checkpoint: a restarted job continues where it stopped, and a
throttle in force stays in force across a restart. When a cluster's config was removed from the fleet,
the source sends one REMOVED row for it in the first micro-batch after the restart: its state is then
dropped and one REMOVED row (no value, never published) tells the driver, which logs it. (No timers:
a checkpoint's time mode cannot change, and existing checkpoints were made without one.)
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import zlib
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StringType, StructField, StructType

from quota_pipeline.core.cache import CacheState, Entry
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core import kernel, trend
from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.decision import DecisionState
from quota_pipeline.core.record import SCHEMA_VERSION, ThrottleDecision
from quota_pipeline.core.cluster_pass import PARTITION, TOPICS, ClusterPass
from quota_pipeline.streaming import packed
from quota_pipeline.streaming.source import REMOVED  # also the status of the row reporting a dropped state
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import (
    Decision, DecisionSource, PartitionSize, epoch_micros,
    from_epoch_micros,
)

OUTPUT_SCHEMA = (
    "key string, cluster_id string, config_name string, tick long, observed_at timestamp, value string, "
    "throttle_factor double, decision_source string, status string, violations int, active_brokers int, "
    "active_log_dirs int, cached_volumes int, evicted int, volumes string"
)
OUTPUT_COLUMNS = tuple(f.split()[0] for f in OUTPUT_SCHEMA.split(", "))
STATE_SCHEMA = StructType([StructField("json", StringType())])
# A ClusterPass needs settings to be made; each run of snapshots sets its own (DecisionProcessor.handleInputRows).
_ANY_SETTINGS = Settings(Limits(Limit("bytes", 0)), dt.timedelta(0))


def encode_state(state: DecisionState, config_name: str | None = None) -> str:
    d = state.decision
    return json.dumps({
        "config": config_name,  # the configured cluster that last updated it: a removal names it
        "registered": sorted(state.cache.registered),
        "entries": [[e.broker_id, e.log_dir, epoch_micros(e.observed_at), e.total_bytes, e.available_bytes,
                     kernel.FENCED_PIN if e.fenced_pin else e.pinned,
                     e.fill_rate, [[p.topic, p.partition, p.size_bytes] for p in e.top_partitions], e.eta_seconds,
                     None if e.topics is None else list(e.topics)]
                    for e in state.cache.entries.values()],
        "history": [[b, ld, [list(h) for h in hist]] for (b, ld), hist in state.cache.history.items()],
        "buckets": [[b, ld, [list(m) for m in mins]] for (b, ld), mins in state.cache.buckets.items()],
        "decision": None if d is None else [d.factor, d.source.value, epoch_micros(d.valid_from),
                                            None if d.throttled_since is None else epoch_micros(d.throttled_since)],
    }, separators=(",", ":"))


def decode_state(text: str | None) -> DecisionState:
    """The inverse of encode_state; a state written before fill rates, throttle episodes or topics reads as without
    them (topics not known)."""
    if not text:
        return DecisionState()
    raw = json.loads(text)
    entries = {}
    for b, ld, t, total, avail, pinned, *extra in raw["entries"]:
        fill, parts, eta, topics = (extra + [None, [], None, None][len(extra):])[:4]
        entries[(b, ld)] = Entry(b, ld, from_epoch_micros(t), total, avail, bool(pinned), fill,
                                 tuple(PartitionSize(*p) for p in parts), fenced_pin=pinned == kernel.FENCED_PIN,
                                 eta_seconds=eta, topics=None if topics is None else tuple(topics))
    history = {(b, ld): tuple(tuple(h) for h in hist) for b, ld, hist in raw.get("history", [])}
    # A bucket saved before tops were kept ([t, least]) has an unknown top: it never passes for a clean-up.
    buckets = {(b, ld): tuple((*m, trend.UNKNOWN_TOP)[:3] for m in mins) for b, ld, mins in raw.get("buckets", [])}
    d = raw["decision"]
    decision = None if d is None else Decision(
        d[0], DecisionSource(d[1]), from_epoch_micros(d[2]),
        from_epoch_micros(d[3]) if len(d) > 3 and d[3] is not None else None)
    return DecisionState(CacheState(entries, frozenset(raw["registered"]), history, buckets), decision)


def _missing(value: Any) -> bool:
    """None, or the NaN pandas puts in an object column where a row has no list."""
    return value is None or (isinstance(value, float) and pd.isna(value))


def save_state(columns: ClusterPass, config_name: str | None) -> str:
    """The state value: JSON naming the configured cluster that last updated it (a removal reads it) and the
    columnar state (ClusterPass.to_bytes), deflated: a 500-log-dir cluster's 210 kB are about 20 kB, and the state
    store writes and the state's round trips to the JVM carry every cluster's state on every micro-batch."""
    return json.dumps({"config": config_name, "compressed": "zlib",
                       "columns": base64.b64encode(zlib.compress(columns.to_bytes(), 1)).decode("ascii")})


def state_columns(raw: dict) -> bytes:
    """ClusterPass.to_bytes of a saved state (one saved before compression included)."""
    data = base64.b64decode(raw["columns"])
    return zlib.decompress(data) if raw.get("compressed") == "zlib" else data


def load_state(cluster_id: str, text: str | None) -> ClusterPass:
    """The cluster's carried state: the columnar form, or encode_state's form (earlier versions) converted."""
    columns = ClusterPass(cluster_id, _ANY_SETTINGS)
    raw = json.loads(text) if text else {}
    if "columns" in raw:
        return columns.restore(state_columns(raw))
    return from_decision_state(columns, decode_state(text))


def from_decision_state(columns: ClusterPass, state: DecisionState) -> ClusterPass:
    """A checkpoint written by the Python form (encode_state) carried on by the columnar one."""
    cache = state.cache
    keys = sorted(set(cache.entries) | set(cache.history) | set(cache.buckets))
    brokers = np.array(sorted(set(cache.registered) | {b for b, _ in keys}), np.int64)
    st = kernel.State.empty(len(keys), len(brokers))
    partitions, topics = [], []
    for k, key in enumerate(keys):
        e = cache.entries.get(key)
        if e is not None:
            offline = e.total_bytes is None or e.available_bytes is None
            st.has[k], st.offline[k] = True, offline
            st.pinned[k] = kernel.FENCED_PIN if e.fenced_pin else int(e.pinned)
            st.observed[k] = epoch_micros(e.observed_at)
            st.total[k] = kernel.NONE if offline else e.total_bytes
            st.available[k] = kernel.NONE if offline else e.available_bytes
            st.fill[k] = np.nan if e.fill_rate is None else e.fill_rate
            st.eta[k] = np.nan if e.eta_seconds is None else e.eta_seconds
            if not offline or e.top_partitions or e.topics is not None:  # an offline dir that filled up keeps its
                st.row[k] = len(partitions)                                # last reading's
                partitions.append([p.to_json() for p in e.top_partitions])
                topics.append(None if e.topics is None else list(e.topics))
        hist = cache.history.get(key, ())[-kernel.FILL_READINGS:]
        st.hist_n[k] = len(hist)
        for j, (t, a) in enumerate(hist):
            st.hist_t[k, j], st.hist_a[k, j] = t, a
        mins = cache.buckets.get(key, ())[-kernel.ETA_BUCKETS:]
        st.env_n[k] = len(mins)
        for j, (t, a, top) in enumerate(mins):
            st.env_t[k, j], st.env_a[k, j], st.env_m[k, j] = t, a, top
    st.registered[:] = np.isin(brokers, sorted(cache.registered))
    d = state.decision
    if d is not None:
        st.decision[:] = [1.0, d.factor, kernel.SOURCES.index(d.source.value), epoch_micros(d.valid_from),
                          kernel.NONE if d.throttled_since is None else epoch_micros(d.throttled_since)]
    columns.states = [st]
    columns.keys = (np.array([b for b, _ in keys], np.int64), np.array([ld for _, ld in keys], dtype=object))
    columns.brokers = brokers
    columns.partitions = pa.array(partitions, pa.list_(PARTITION))
    columns.topics = pa.array(topics, TOPICS)
    columns.used = np.full(len(keys), np.nan)  # replay's filled_bytes only, as ClusterPass.restore leaves it
    return columns


def flattened(frame: pd.DataFrame, volumes: list[pa.Table]) -> tuple[pa.Table, np.ndarray]:
    """The source's rows (one per snapshot; `volumes`: each row's unpacked volumes) as the cluster pass reads them,
    a status row then one row per volume for each snapshot, and the frame's row each came from. The config's name
    stands for the file, the row for the line."""
    n = len(frame)
    observed = pd.to_datetime(frame["observed_at"], utc=True).astype("int64").to_numpy() // 1000
    status = pa.table({
        "cluster_id": _strings(frame["cluster_id"]),
        "observed_at": pa.nulls(n, pa.string()),
        "observed_us": pa.array(observed, pa.int64()),
        "status": _strings(frame["status"]),
        "brokers": _list_array(frame["brokers"], pa.list_(pa.int64()), _ints),
        "fenced_brokers": _list_array(frame["fenced_brokers"], pa.list_(pa.int64()), _ints),
        **{name: pa.nulls(n, packed.VOLUMES.field(name).type) for name in packed.VOLUMES.names},
        "_file": pa.array(frame["config_name"].astype(str).tolist(), pa.string()),
    })
    counts = np.array([v.num_rows for v in volumes], np.int64)
    of_volume = np.repeat(np.arange(n), counts)
    shared = status.select(["cluster_id", "observed_at", "observed_us", "status", "_file"]).take(of_volume)
    m = len(of_volume)
    rows = pa.Table.from_batches([b for v in volumes for b in v.to_batches()], packed.VOLUMES)
    volume_rows = pa.table({
        **{name: shared.column(name) for name in ("cluster_id", "observed_at", "observed_us", "status")},
        "brokers": pa.nulls(m, pa.list_(pa.int64())), "fenced_brokers": pa.nulls(m, pa.list_(pa.int64())),
        **{name: rows.column(name) for name in packed.VOLUMES.names},
        "_file": shared.column("_file"),
    })
    # Each snapshot's status row first, then its volumes, in the frame's order: the status rows come first in the
    # concatenation, so a stable sort by snapshot keeps each before its volumes and the volumes in their order.
    of_row = np.concatenate([np.arange(n), of_volume])
    order = np.argsort(of_row, kind="stable")
    table = pa.concat_tables([status, volume_rows]).take(order)
    source_row = of_row[order]
    total = table.num_rows
    table = table.set_column(table.schema.get_field_index("_file"), "_file",
                             pc.dictionary_encode(table.column("_file").combine_chunks()))
    table = table.append_column("_offset", pa.array(np.zeros(total, np.int64))).append_column(
        "_line", pa.array(np.arange(1, total + 1, dtype=np.int64)))
    return table, source_row


def _unpacked(frame: pd.DataFrame) -> list[pa.Table]:
    return [packed.unpack(None if _missing(v) else bytes(v)) for v in frame["volumes"]]


def _list_array(column: pd.Series, type_: pa.DataType, per_row: Callable[[Any], Any]) -> pa.Array:
    """A column of lists as Arrow converts it, in one call: Spark hands nested values to pandas as lists, arrays and
    dicts, and flattening them row by row in Python took 6.9 of the stateful step's 22 ms per batch for a
    500-log-dir cluster (4.6 ms this way; bench/decide_profile.py). Values Arrow cannot take (the tuples of plain
    rows) go through `per_row`."""
    try:
        return pa.array(column.to_numpy(dtype=object), type=type_, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([per_row(v) for v in column], type_)


def _strings(column: pd.Series) -> pa.Array:
    return pa.array(column.to_numpy(dtype=object), pa.string(), from_pandas=True)


def _ints(value: Any) -> list[int] | None:
    return None if _missing(value) else [int(b) for b in value]


def record_json(r: dict, decided_at: dt.datetime, limit: dict, output_key: str | None) -> dict:
    """A record of the cluster pass as the published JSON, through the record's one definition."""
    return ThrottleDecision.from_json({**r, "schema_version": SCHEMA_VERSION, "decided_at": decided_at,
                                       "cluster_id": output_key or r["cluster_id"], "limit": limit}).to_json()


class DecisionProcessor(StatefulProcessor):
    """Keyed by cluster_id; `settings` and `output_keys` are per configured cluster (config_name)."""

    def __init__(self, settings: dict[str, Settings], output_keys: dict[str, str | None],
                 clock: Clock = SYSTEM) -> None:
        self.settings = settings
        self.output_keys = output_keys
        self.clock = clock

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("cluster", STATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        removals = frame["status"] == REMOVED
        if removals.any():
            yield from self._remove(key, frame[removals], frame[~removals])
            frame = frame[~removals]
            if frame.empty:
                return
        stored = self.state.get()  # None when there is none (one round trip to the JVM, not two)
        columns = load_state(key[0], stored[0] if stored else None)
        out: dict[str, list] = {name: [] for name in OUTPUT_COLUMNS}
        frame = frame.reset_index(drop=True)
        volumes = _unpacked(frame)
        table, source_row = flattened(frame, volumes)
        names = frame["config_name"].astype(str).to_numpy()
        # Runs of snapshots of one configured cluster, in time order (almost always one run: one config per id).
        order = np.lexsort((names, frame["observed_at"].to_numpy()))
        bounds = np.flatnonzero(names[order][1:] != names[order][:-1]) + 1
        for run in np.split(order, bounds):
            config_name = str(names[run[0]])
            settings = self.settings[config_name]
            columns.params = [kernel.Params.of(settings)]
            mine = np.zeros(len(frame), bool)
            mine[run] = True
            batch = columns.decide(table.filter(pa.array(mine[source_row])))
            if batch is None:
                continue
            self._rows(out, batch, columns.last, frame["tick"].to_numpy()[run], [volumes[i] for i in run], settings,
                       config_name)
        self.state.update((save_state(columns, out["config_name"][-1] if out["key"] else None),))
        if out["key"]:
            yield pd.DataFrame(out)

    def _rows(self, out: dict[str, list], batch: pa.RecordBatch, o: Any, ticks: np.ndarray, volumes: list[pa.Table],
              settings: Settings, config_name: str) -> None:
        """The job's output rows for the records of one run of snapshots, in time order, appended to `out`."""
        records = batch.to_pylist()
        now = self.clock.now()
        limit = settings.limits.to_json()
        output_key = self.output_keys.get(config_name)
        for i, (r, tick, vols) in enumerate(zip(records, ticks, volumes)):
            value = record_json(r, now, limit, output_key)
            v = vols.select(["broker_id", "log_dir", "total_bytes", "available_bytes"]).to_pydict()
            listed = [list(x) for x in zip(v["broker_id"], v["log_dir"], v["total_bytes"], v["available_bytes"])]
            for name, item in (
                    ("key", value["cluster_id"]), ("cluster_id", r["cluster_id"]), ("config_name", config_name),
                    ("tick", int(tick)), ("observed_at", r["observed_at"].replace(tzinfo=None)),
                    ("value", json.dumps(value)), ("throttle_factor", r["throttle_factor"]),
                    ("decision_source", r["source"]), ("status", r["status"]), ("violations", r["violations"]),
                    ("active_brokers", r["active_brokers"]), ("active_log_dirs", r["active_log_dirs"]),
                    ("cached_volumes", int(o.cached[i])), ("evicted", int(o.evicted[i])),
                    ("volumes", json.dumps(listed))):
                out[name].append(item)

    def _remove(self, key: Any, markers: pd.DataFrame, others: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """Drop the state of a cluster whose config left the fleet, unless a configured cluster still decides
        with it: one observing the same cluster id, in this batch or as the state's last writer."""
        if not self.state.exists() or not others.empty:
            return
        last_writer = json.loads(self.state.get()[0]).get("config")
        if last_writer in self.settings or any(name in self.settings for name in markers["config_name"]):
            return
        self.state.clear()
        row = dict.fromkeys(OUTPUT_COLUMNS, None)
        row.update(key=key[0], cluster_id=key[0], config_name=str(markers["config_name"].iloc[0]), status=REMOVED)
        yield pd.DataFrame([row], dtype=object)

    def close(self) -> None:
        pass
