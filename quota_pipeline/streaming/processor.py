"""The stateful step of the streaming job: transformWithStateInPandas keyed by cluster, running core.decision.step.

The whole per-cluster state (volume cache, registered brokers, current decision) is one value in
the state store, so it lives in the checkpoint: a restarted job continues where it stopped, and a
throttle in force stays in force across a restart. When a cluster's config was removed from the fleet,
the source sends one REMOVED row for it in the first micro-batch after the restart: its state is then
dropped and one REMOVED row (no value, never published) tells the driver, which logs it. (No timers:
a checkpoint's time mode cannot change, and existing checkpoints were made without one.)
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StringType, StructField, StructType

from quota_pipeline.core.cache import CacheState, Entry
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.decision import DecisionState, step
from quota_pipeline.core.record import build_record
from quota_pipeline.streaming.source import REMOVED  # also the status of the row reporting a dropped state
from quota_pipeline.core.settings import Settings
from quota_pipeline.core.model import (
    Decision, DecisionSource, PartitionSize, Status, Volume, VolumeSnapshot, epoch_micros, from_epoch_micros,
)

OUTPUT_SCHEMA = (
    "key string, cluster_id string, config_name string, tick long, observed_at timestamp, value string, "
    "throttle_factor double, decision_source string, status string, violations int, active_brokers int, "
    "active_log_dirs int, cached_volumes int, evicted int, volumes string"
)
STATE_SCHEMA = StructType([StructField("json", StringType())])


def encode_state(state: DecisionState, config_name: str | None = None) -> str:
    d = state.decision
    return json.dumps({
        "config": config_name,  # the configured cluster that last updated it: a removal names it
        "registered": sorted(state.cache.registered),
        "entries": [[e.broker_id, e.log_dir, epoch_micros(e.observed_at), e.total_bytes, e.available_bytes, e.pinned,
                     e.fill_rate, [[p.topic, p.partition, p.size_bytes] for p in e.top_partitions]]
                    for e in state.cache.entries.values()],
        "history": [[b, ld, [list(h) for h in hist]] for (b, ld), hist in state.cache.history.items()],
        "decision": None if d is None else [d.factor, d.source.value, epoch_micros(d.valid_from),
                                            None if d.throttled_since is None else epoch_micros(d.throttled_since)],
    }, separators=(",", ":"))


def decode_state(text: str | None) -> DecisionState:
    """The inverse of encode_state; a state written before fill rates and throttle episodes reads as without them."""
    if not text:
        return DecisionState()
    raw = json.loads(text)
    entries = {}
    for b, ld, t, total, avail, pinned, *extra in raw["entries"]:
        fill, parts = (extra + [None, []])[:2]
        entries[(b, ld)] = Entry(b, ld, from_epoch_micros(t), total, avail, pinned, fill,
                                 tuple(PartitionSize(*p) for p in parts))
    history = {(b, ld): tuple(tuple(h) for h in hist) for b, ld, hist in raw.get("history", [])}
    d = raw["decision"]
    decision = None if d is None else Decision(
        d[0], DecisionSource(d[1]), from_epoch_micros(d[2]),
        from_epoch_micros(d[3]) if len(d) > 3 and d[3] is not None else None)
    return DecisionState(CacheState(entries, frozenset(raw["registered"]), history), decision)


def snapshots_from_rows(frame: pd.DataFrame) -> list[tuple[str, int, VolumeSnapshot]]:
    """Rebuild (source, tick, snapshot) from the source's status row and volume rows, in time order."""
    out = []
    for (config_name, tick), rows in frame.groupby(["config_name", "tick"], sort=False):
        status_row = rows[rows["broker_id"].isna()].iloc[0]
        vols = rows[rows["broker_id"].notna()]
        volumes = tuple(
            Volume(int(v.broker_id), str(v.log_dir), None if pd.isna(v.total_bytes) else int(v.total_bytes),
                   None if pd.isna(v.available_bytes) else int(v.available_bytes),
                   None if v.error is None or (isinstance(v.error, float) and pd.isna(v.error)) else str(v.error),
                   tuple(_partition(p) for p in _list(v.top_partitions)))
            for v in vols.itertuples(index=False))
        observed = pd.Timestamp(status_row.observed_at)
        observed = (observed.tz_localize("UTC") if observed.tzinfo is None else observed.tz_convert("UTC"))
        message = status_row.message
        snap = VolumeSnapshot(
            cluster_id=str(status_row.cluster_id), observed_at=observed.to_pydatetime(),
            status=Status(status_row.status), brokers=tuple(int(b) for b in _list(status_row.brokers)),
            fenced_brokers=tuple(int(b) for b in _list(status_row.fenced_brokers)), volumes=volumes,
            message=None if message is None or (isinstance(message, float) and pd.isna(message)) else str(message))
        out.append((str(config_name), int(tick), snap))
    out.sort(key=lambda x: x[2].observed_at)
    return out


def _partition(p: Any) -> PartitionSize:
    """A top_partitions element: a dict from Arrow, a tuple from plain rows."""
    topic, partition, size = (p["topic"], p["partition"], p["size_bytes"]) if isinstance(p, dict) else p
    return PartitionSize(str(topic), int(partition), int(size))


def _list(value: Any) -> list:
    return [] if value is None or (isinstance(value, float) and pd.isna(value)) else list(value)


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
        stored = self.state.get() if self.state.exists() else None
        state = decode_state(stored[0] if stored else None)
        out = []
        for config_name, tick, snap in snapshots_from_rows(frame):
            settings = self.settings[config_name]
            before = set(state.cache.entries)
            summary, decision = step(state, snap, settings)
            evicted = len(before - set(state.cache.entries))  # keys only ever leave the cache by expiry
            rec = build_record(summary, decision, settings, self.clock.now(), self.output_keys.get(config_name))
            out.append({
                "key": rec.cluster_id, "cluster_id": snap.cluster_id, "config_name": config_name, "tick": tick,
                "observed_at": snap.observed_at.replace(tzinfo=None), "value": json.dumps(rec.to_json()),
                "throttle_factor": decision.factor, "decision_source": decision.source.value,
                "status": snap.status.value, "violations": summary.violations,
                "active_brokers": summary.active_brokers, "active_log_dirs": summary.active_log_dirs,
                "cached_volumes": len(state.cache.entries), "evicted": evicted,
                "volumes": json.dumps([[v.broker_id, v.log_dir, v.total_bytes, v.available_bytes]
                                       for v in snap.volumes]),
            })
        self.state.update((encode_state(state, out[-1]["config_name"] if out else None),))
        if out:
            yield pd.DataFrame(out)

    def _remove(self, key: Any, markers: pd.DataFrame, others: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """Drop the state of a cluster whose config left the fleet, unless a configured cluster still decides
        with it: one observing the same cluster id, in this batch or as the state's last writer."""
        if not self.state.exists() or not others.empty:
            return
        last_writer = json.loads(self.state.get()[0]).get("config")
        if last_writer in self.settings or any(name in self.settings for name in markers["config_name"]):
            return
        self.state.clear()
        row = dict.fromkeys((f.split()[0] for f in OUTPUT_SCHEMA.split(", ")), None)
        row.update(key=key[0], cluster_id=key[0], config_name=str(markers["config_name"].iloc[0]), status=REMOVED)
        yield pd.DataFrame([row], dtype=object)

    def close(self) -> None:
        pass
