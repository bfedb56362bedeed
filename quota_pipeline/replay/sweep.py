"""What-if sweeps: the data of one replay decided under several values of one property, over one read.

Each cluster task (replay/cluster_files.py) reads a chunk once and runs the compiled decision steps
(core/compiled/kernel.py) once per setting over it; what each setting did is summed up here per cluster.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from quota_pipeline.core import config as cfg
from quota_pipeline.core.properties import BY_NAME, P, Invalid
from quota_pipeline.core.settings import Settings

SWEEPABLE = (cfg.HARD_RATIO, cfg.HARD_BYTES, cfg.SOFT_RATIO, cfg.SOFT_BYTES, cfg.VALIDITY, cfg.FALLBACK,
             cfg.ETA_HORIZON, cfg.ETA_WINDOW)
# A sweep value replaces the configured limit of the same rank, whatever its kind (bytes or ratio).
_SAME_RANK = {cfg.HARD_RATIO: cfg.HARD_BYTES, cfg.HARD_BYTES: cfg.HARD_RATIO,
              cfg.SOFT_RATIO: cfg.SOFT_BYTES, cfg.SOFT_BYTES: cfg.SOFT_RATIO}
MAX_VALUES = 20



class SweepError(ValueError):
    """A --sweep argument that cannot be used; the message is one line saying what to pass instead."""


@dataclass(frozen=True)
class Sweep:
    key: str                       # the full property name
    values: tuple[str, ...]        # as given, for the table
    settings: tuple[Settings, ...]



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
    # The predictive policy's proof on history (issue 21):
    stopped_s: float = 0.0        # factor 0 from observations (retained included): production stopped
    least_headroom_bytes: float | None = None  # the least bytes any log dir read had above the hard limit
    deferred_bytes: float = 0.0   # sum of (1 - factor in force) x the bytes the log dirs grew by meanwhile

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
                         f"{'PT1M,PT5M' if key in (cfg.VALIDITY, cfg.ETA_HORIZON, cfg.ETA_WINDOW) else '0.03,0.05'}")
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


def episode_metrics(t_us: np.ndarray, factor: np.ndarray, fallback: np.ndarray, ratio: np.ndarray,
                    headroom: np.ndarray | None = None, written: np.ndarray | None = None) -> dict:
    """Time throttled, episodes, longest episode, time in fallback and least ratio while unthrottled, with each
    decision in force until the next one (the last holds for no time), as replay.summary_table counts them; and
    time stopped (factor 0, the fallback's aside), the least headroom read (`headroom` per snapshot, NaN: none
    read) and the bytes deferred: each decision's (1 - factor) times `written[i + 1]`, the bytes the log dirs grew
    by until the next snapshot (replay/tally.filled_bytes). Deferred bytes are relative to the journal: where the
    recorded cluster was already stopped its disks did not grow, so nothing more is deferred there."""
    span = np.diff(t_us, append=t_us[-1:]).astype(float) / 1e6 if len(t_us) else np.zeros(0)
    head = headroom[~np.isnan(headroom)] if headroom is not None else np.zeros(0)
    after = written[1:] if written is not None and len(written) else np.zeros(0)
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
        "stopped_s": float(span[(factor <= 0.0) & ~fallback].sum()),
        "least_headroom_bytes": float(head.min()) if len(head) else None,
        "deferred_bytes": float(((1.0 - factor[:-1]) * after).sum()) if len(after) else 0.0,
    }


def cluster_summary(t_us: np.ndarray, factor: np.ndarray, fallback: np.ndarray, violations: np.ndarray,
                    failed: np.ndarray) -> dict:
    """What `replay` prints per cluster: snapshots, period, time throttled by observations and by the fallback
    (a factor below 1 in force until the next decision), throttle episodes, most violations, failed polls."""
    if not len(t_us):
        return {"snapshots": 0, "first_us": None, "last_us": None, "throttled_s": None, "fallback_s": None,
                "episodes": 0, "max_violations": None, "failed_polls": 0}
    span = np.diff(t_us, append=t_us[-1:]).astype(float) / 1e6
    throttled = factor < 1.0
    starts = throttled & ~np.concatenate([[False], throttled[:-1]])
    return {
        "snapshots": int(len(t_us)), "first_us": int(t_us[0]), "last_us": int(t_us[-1]),
        "throttled_s": float(span[throttled & ~fallback].sum()) if (throttled & ~fallback).any() else None,
        "fallback_s": float(span[throttled & fallback].sum()) if (throttled & fallback).any() else None,
        "episodes": int(starts.sum()), "max_violations": int(violations.max()), "failed_polls": int(failed.sum()),
    }
