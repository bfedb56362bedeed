"""What-if sweeps: the data of one replay decided under several values of one property, in one pass.

The cache of log dir readings depends on the validity (readings expire) but not on the limits or the fallback,
so settings that share the replay's validity are judged in the replay's own per-snapshot aggregation (one more
conditional sum and min per limits, intervals.summaries(sweep=...)); other validities get one lean aggregation
each over the same staged input. Only the one-row-per-snapshot step 4 (core.decision.advance) runs per setting.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from quota_pipeline.core import config as cfg
from quota_pipeline.core.decision import advance
from quota_pipeline.core.model import Decision, DecisionSource, SnapshotSummary, Status, from_epoch_micros
from quota_pipeline.core.properties import BY_NAME, P, Invalid
from quota_pipeline.core.settings import Settings
from quota_pipeline.replay import intervals as aggregate

SWEEPABLE = (cfg.HARD_RATIO, cfg.HARD_BYTES, cfg.SOFT_RATIO, cfg.SOFT_BYTES, cfg.VALIDITY, cfg.FALLBACK)
# A sweep value replaces the configured limit of the same rank, whatever its kind (bytes or ratio).
_SAME_RANK = {cfg.HARD_RATIO: cfg.HARD_BYTES, cfg.HARD_BYTES: cfg.HARD_RATIO,
              cfg.SOFT_RATIO: cfg.SOFT_BYTES, cfg.SOFT_BYTES: cfg.SOFT_RATIO}
MAX_VALUES = 20

ROW_SCHEMA = T.StructType([
    T.StructField("cluster_id", T.StringType()),
    T.StructField("setting", T.IntegerType()),
    T.StructField("snapshots", T.LongType()),
    T.StructField("throttled_s", T.DoubleType()),
    T.StructField("episodes", T.LongType()),
    T.StructField("longest_episode_s", T.DoubleType()),
    T.StructField("fallback_s", T.DoubleType()),
    T.StructField("min_ratio_unthrottled", T.DoubleType()),
])


class SweepError(ValueError):
    """A --sweep argument that cannot be used; the message is one line saying what to pass instead."""


@dataclass(frozen=True)
class Sweep:
    key: str                       # the full property name
    values: tuple[str, ...]        # as given, for the table
    settings: tuple[Settings, ...]

    def groups(self, base: Settings) -> dict[dt.timedelta, list[int]]:
        """Indices of the settings by validity, the base validity first (it shares the replay's aggregation)."""
        out: dict[dt.timedelta, list[int]] = {base.validity: []}
        for i, s in enumerate(self.settings):
            out.setdefault(s.validity, []).append(i)
        return out


@dataclass(frozen=True)
class SweepRow:
    """What one setting did to one cluster over the whole replay."""

    cluster_id: str
    key: str
    value: str
    snapshots: int
    throttled_s: float            # factor < 1 from observations (retained included), as the replay summary counts
    episodes: int                 # runs of consecutive decisions with factor < 1 (any source)
    longest_episode_s: float
    fallback_s: float             # source FALLBACK, whatever its factor: nobody was watching the disks
    min_ratio_unthrottled: float | None  # the least available ratio while the factor was 1

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def parse(spec: str, conf: cfg.Config) -> Sweep:
    """KEY=V1,V2,... into one Settings per value; every value goes through the property table and the rules that
    join properties (a soft limit above the hard one), so a bad one is refused before Spark starts."""
    key, sep, raw = spec.partition("=")
    key = key.strip()
    if not key.startswith(P) and P + key in SWEEPABLE:
        key = P + key  # the prefix may be left out
    if key not in SWEEPABLE:
        names = ", ".join(k[len(P):] for k in SWEEPABLE)
        raise SweepError(f"--sweep: {key or spec!r} cannot be swept; use KEY=V1,V2,... with KEY one of {names} "
                         f"(with or without the {P} prefix)")
    values = tuple(v.strip() for v in raw.split(",")) if sep else ()
    if not values or any(not v for v in values):
        raise SweepError(f"--sweep: {key}: give comma-separated values, e.g. --sweep {key}="
                         f"{'PT1M,PT5M' if key == cfg.VALIDITY else '0.03,0.05'}")
    if len(set(values)) != len(values) or len(values) > MAX_VALUES:
        raise SweepError(f"--sweep: {key}: give at most {MAX_VALUES} distinct values (got {raw})")
    settings = []
    for value in values:
        try:
            BY_NAME[key].convert(value)
        except Invalid as exc:
            raise SweepError(f"--sweep: {key}: {exc} (got {value})") from None
        props = {k: v for k, v in conf.raw.items() if k != _SAME_RANK.get(key)}
        props[key] = value
        try:
            settings.append(Settings.of(cfg.parse(props, conf.path, require_admin=False)))
        except cfg.ConfigError as exc:
            raise SweepError(f"--sweep: {key}={value}: {str(exc.problems[0]).removeprefix('error: ')}") from None
    return Sweep(key, values, tuple(settings))


def aggregations(snaps: DataFrame, base: Settings, base_summaries: DataFrame, sweep: Sweep
                 ) -> list[tuple[DataFrame, list[int]]]:
    """(per-snapshot summaries, the sweep settings they serve) for each validity: the replay's own summaries for
    the base validity (computed with intervals.summaries(sweep=limits_for(...))), a lean aggregation per other."""
    groups = sweep.groups(base)
    parts = [(base_summaries, groups.pop(base.validity))]
    for validity, indices in groups.items():
        settings = dataclasses.replace(base, validity=validity)
        parts.append((aggregate.summaries(snaps, settings, [sweep.settings[i].limits for i in indices],
                                          detail=False), indices))
    return [(df, ix) for df, ix in parts if ix]


def limits_for(sweep: Sweep | None, base: Settings):
    """The limits the replay's own aggregation must also judge by: those of the settings sharing its validity."""
    if sweep is None:
        return []
    return [sweep.settings[i].limits for i in sweep.groups(base)[base.validity]]


def decide(parts: list[tuple[DataFrame, list[int]]], sweep: Sweep) -> list[SweepRow]:
    """Step 4 per cluster and setting inside applyInPandas; one row of metrics per (cluster, setting) comes back."""
    frames = []
    for group, (summaries, indices) in enumerate(parts):
        cols = [F.col(name).alias(f"{prefix}_{i}") for j, i in enumerate(indices)
                for name, prefix in zip(aggregate.sweep_columns(j), ("v", "f"))]
        frames.append(summaries.select(
            "cluster_id", F.lit(group).alias("group"), F.unix_micros("observed_at").alias("t_us"), "status",
            "complete", "min_available_ratio", *cols))
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f, allowMissingColumns=True)
    groups = [indices for _, indices in parts]
    rows = union.groupBy("cluster_id").applyInPandas(_decide_cluster(sweep.settings, groups), ROW_SCHEMA).collect()
    out = [SweepRow(r.cluster_id, sweep.key, sweep.values[r.setting], r.snapshots, r.throttled_s, r.episodes,
                    r.longest_episode_s, r.fallback_s, r.min_ratio_unthrottled) for r in rows]
    return sorted(out, key=lambda r: (r.cluster_id, sweep.values.index(r.value)))


def _decide_cluster(settings: Sequence[Settings], groups: list[list[int]]):
    def run(frame: pd.DataFrame) -> pd.DataFrame:
        out = []
        for group, part in frame.groupby("group"):
            part = part.sort_values("t_us")
            t_us = part["t_us"].to_numpy(dtype=np.int64)
            times = [from_epoch_micros(int(t)) for t in t_us]
            statuses = [Status(s) for s in part["status"]]
            complete = part["complete"].to_numpy(dtype=bool)
            ratio = part["min_available_ratio"].to_numpy(dtype=float, na_value=np.nan)
            for i in groups[int(group)]:
                factor, fallback = decide_series(part["cluster_id"].iloc[0], times, statuses, complete,
                                                 part[f"v_{i}"].to_numpy(dtype=np.int64),
                                                 part[f"f_{i}"].to_numpy(dtype=float), settings[i])
                m = episode_metrics(t_us, factor, fallback, ratio)
                out.append({"cluster_id": part["cluster_id"].iloc[0], "setting": i, "snapshots": len(part), **m})
        return pd.DataFrame(out, columns=[f.name for f in ROW_SCHEMA.fields])
    return run


def decide_series(cluster_id: str, times: list[dt.datetime], statuses: list[Status], complete: np.ndarray,
                  violations: np.ndarray, policy_factor: np.ndarray, settings: Settings
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(factor, source is FALLBACK) per snapshot: core.decision.advance over one cluster's summaries in time order.
    Only what step 4 reads is filled in (counts and missing brokers do not change a decision)."""
    factor = np.empty(len(times))
    fallback = np.zeros(len(times), dtype=bool)
    current: Decision | None = None
    for k, t in enumerate(times):
        current = advance(current, SnapshotSummary(
            cluster_id, t, statuses[k], 0, 0, (), int(violations[k]), float(policy_factor[k]), bool(complete[k])),
            settings)
        factor[k] = current.factor
        fallback[k] = current.source is DecisionSource.FALLBACK
    return factor, fallback


def episode_metrics(t_us: np.ndarray, factor: np.ndarray, fallback: np.ndarray, ratio: np.ndarray) -> dict:
    """Time throttled, episodes, longest episode, time in fallback and least ratio while unthrottled, with each
    decision in force until the next one (the last holds for no time), as replay.summary_table counts them."""
    span = np.diff(t_us, append=t_us[-1:]).astype(float) / 1e6 if len(t_us) else np.zeros(0)
    throttled = factor < 1.0
    starts = throttled & ~np.concatenate([[False], throttled[:-1]])
    episode = np.cumsum(starts)  # the number of the episode a throttled decision belongs to
    lengths = np.bincount(episode[throttled], weights=span[throttled]) if throttled.any() else np.zeros(1)
    free = ratio[~throttled & ~np.isnan(ratio)]
    return {
        "throttled_s": float(span[throttled & ~fallback].sum()),
        "episodes": int(starts.sum()),
        "longest_episode_s": float(lengths.max()),
        "fallback_s": float(span[fallback].sum()),
        "min_ratio_unthrottled": float(free.min()) if len(free) else None,
    }
