"""What `replay --report` draws, gathered from the replay's files with pyarrow as small pandas frames: one row group
at a time, so bounded whatever the journal's size, and no Spark on either engine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quota_pipeline.core.reference import policy
from quota_pipeline.core.compiled.frame import in_range, times
from quota_pipeline.core.config import Limits
from quota_pipeline.core.settings import Settings

# Points per cluster in the time charts, and time columns of the heat map: a year of 10 s snapshots is drawn
# from minima per bucket, so a dip shorter than a bucket still shows (only its width is lost).
MAX_POINTS = 4000
HEAT_COLUMNS = 160


@dataclass(frozen=True)
class ReportFrames:
    """Per cluster, times in UTC: `decisions` (observed_at, throttle_factor, fallback, min_available_ratio;
    per bucket the least factor and ratio, fallback if any decision in it was), `worst` (the log dir that came
    closest to the hard limit: broker_id, log_dir, observed_at, available_bytes, available_ratio, offline),
    `heat` (broker_id, observed_at = bucket start, min_ratio, offline readings as 0), `bucket_s` (seconds per
    heat map column)."""

    limits: Limits
    decisions: pd.DataFrame
    worst: pd.DataFrame
    heat: pd.DataFrame
    bucket_s: dict[str, float]


class _NumpyOps:
    """policy's Ops over numpy arrays: both branches computed, the condition picks (a division by 0 it discards
    is no error)."""

    def lit(self, value: float) -> float:
        return value

    def case(self, cond: Any, then: Callable[[], Any], otherwise: Callable[[], Any]) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(cond, then(), otherwise())

    def is_null(self, value: Any) -> Any:
        return np.isnan(value)

    def any(self, *conds: Any) -> Any:
        return np.logical_or.reduce(conds)

    def div(self, num: Any, den: Any) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(num, float) / np.asarray(den, float)

    def clamp01(self, value: Any) -> Any:
        return np.minimum(1.0, np.maximum(0.0, value))


def available_ratio(available: pa.Array, total: pa.Array) -> pa.Array:
    """policy.available_ratio per reading; null where either byte count is (an offline reading)."""
    missing = pc.or_(pc.is_null(available), pc.is_null(total)).to_numpy(zero_copy_only=False)
    a = available.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    t = total.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    ratio = np.asarray(policy.available_ratio(a, t, _NumpyOps()), float)
    return pa.array(ratio, pa.float64(), mask=missing)


def _row_groups(files: Sequence[Any], columns: Sequence[str]) -> Iterator[pa.Table]:
    for f in files:
        pf = pq.ParquetFile(str(f))
        names = set(pf.schema_arrow.names)
        for g in range(pf.metadata.num_row_groups):
            yield pf.read_row_group(g, columns=[c for c in columns if c in names])


def _bucket(t_us: np.ndarray, t0: np.ndarray, t1: np.ndarray, n: int) -> np.ndarray:
    """Of n equal spans of each row's cluster time range [t0, t1], the one holding t_us (as Spark's floor, least)."""
    width = np.maximum(1.0, (t1 - t0) / float(n))
    return np.minimum(n - 1, np.floor((t_us - t0) / width)).astype(np.int64)


def _aggregate(parts: list[pa.Table], keys: list[str], aggs: list[tuple[str, str]], schema: pa.Schema) -> pa.Table:
    """Partial aggregates of several row groups combined (min of minima, max of maxima), as one table."""
    if not parts:
        return schema.empty_table()
    out = pa.concat_tables(parts).group_by(keys, use_threads=False).aggregate(aggs)
    return pa.table({**{k: out.column(k) for k in keys}, **{c: out.column(f"{c}_{how}") for c, how in aggs}})


def _records(parts: Sequence[Any]) -> Iterator[pa.Table]:
    """The decision records: cluster_id, t_us, throttle_factor, fallback, min_available_ratio."""
    for g in _row_groups(parts, ("cluster_id", "observed_at", "throttle_factor", "source", "min_available_ratio")):
        yield pa.table({
            "cluster_id": g.column("cluster_id"),
            "t_us": pc.cast(g.column("observed_at"), pa.int64()),
            "throttle_factor": g.column("throttle_factor"),
            "fallback": pc.fill_null(pc.equal(g.column("source"), "FALLBACK"), False),
            "min_available_ratio": g.column("min_available_ratio"),
        })


def _readings(files: Sequence[str]) -> Iterator[pa.Table]:
    """Readings in flattened Parquet journals (of SUCCESS snapshots and partial views: a failed poll's volume rows
    are those of the brokers that answered): cluster_id, t_us, broker_id, log_dir, available_bytes,
    available_ratio. Rows are not checked here (replay checks them); times outside the journal's range are left
    out, as replay rejects them."""
    for f in files:
        names = set(pq.ParquetFile(f).schema_arrow.names)
        if not {"cluster_id", "broker_id", "log_dir", "status"} <= names:
            continue
        for g in _row_groups([f], ("cluster_id", "observed_at", "observed_us", "broker_id", "log_dir",
                                   "available_bytes", "total_bytes")):
            if "observed_at" not in g.column_names:
                g = g.append_column("observed_at", pa.nulls(g.num_rows, pa.string()))
            t = times(g.set_column(g.column_names.index("observed_at"), "observed_at",
                                   pc.cast(g.column("observed_at"), pa.string())))
            keep = in_range(t) & g.column("broker_id").is_valid().to_numpy(zero_copy_only=False)
            if not keep.any():
                continue
            g = g.filter(pa.array(keep))
            cols = {c: pc.cast(g.column(c), pa.int64()) if c in g.column_names else pa.nulls(g.num_rows, pa.int64())
                    for c in ("available_bytes", "total_bytes")}
            yield pa.table({
                "cluster_id": pc.cast(g.column("cluster_id"), pa.string()), "t_us": pa.array(t[keep]),
                "broker_id": pc.cast(g.column("broker_id"), pa.int64()),
                "log_dir": pc.cast(g.column("log_dir"), pa.string()),
                "available_bytes": cols["available_bytes"],
                "available_ratio": available_ratio(cols["available_bytes"].combine_chunks(),
                                                   cols["total_bytes"].combine_chunks()),
            })


def _with_bounds(table: pa.Table, bounds: dict[str, tuple[int, int]]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The rows of clusters with decisions, with their clusters' t0 and t1 (each cluster id looked up once)."""
    encoded = pc.dictionary_encode(table.column("cluster_id")).combine_chunks()
    words = encoded.dictionary.to_pylist()
    known = np.array([w in bounds for w in words] + [False], bool)
    t0 = np.array([bounds.get(w, (0, 0))[0] for w in words] + [0], np.int64)
    t1 = np.array([bounds.get(w, (0, 0))[1] for w in words] + [0], np.int64)
    idx = encoded.indices.fill_null(len(words)).to_numpy(zero_copy_only=False)
    keep = known[idx]
    if not keep.all():
        table, idx = table.filter(pa.array(keep)), idx[keep]
    return table, t0[idx], t1[idx]


def collect(files: Sequence[str], parts: Sequence[Any], settings: Settings) -> ReportFrames:
    """The report's frames from the journal's flattened Parquet files (staged JSONL included) and the part files
    of the decision records of one replay."""
    recs = list(_records(parts))
    spans = _aggregate([pa.table({"cluster_id": r.column("cluster_id"), "t0": r.column("t_us"), "t1": r.column("t_us")})
                        for r in recs],
                       ["cluster_id"], [("t0", "min"), ("t1", "max")],
                       pa.schema([("cluster_id", pa.string()), ("t0", pa.int64()), ("t1", pa.int64())]))
    bounds = {c: (t0, t1) for c, t0, t1 in zip(*(spans.column(n).to_pylist() for n in ("cluster_id", "t0", "t1")))}
    heat, lowest = _heat_and_lowest(files, bounds, settings)
    heat_pd = heat.to_pandas()
    # A bucket's start: the cluster's first snapshot plus whole bucket widths (as _bucket numbers them).
    start = heat_pd["cluster_id"].map(lambda c: bounds[c][0])
    width = heat_pd["cluster_id"].map(lambda c: max(1.0, (bounds[c][1] - bounds[c][0]) / HEAT_COLUMNS))
    heat_pd["observed_at"] = pd.to_datetime(start + heat_pd["bucket"] * width, unit="us", utc=True)
    return ReportFrames(
        limits=settings.limits,
        decisions=_with_time(_decisions(recs, bounds).to_pandas().drop(columns="bucket")),
        worst=_with_time(_worst(files, bounds, lowest).to_pandas().drop(columns="bucket")),
        heat=heat_pd.drop(columns="bucket").sort_values(["cluster_id", "broker_id", "observed_at"]),
        bucket_s={c: (t1 - t0) / 1e6 / HEAT_COLUMNS for c, (t0, t1) in bounds.items()},
    )


def _decisions(recs: list[pa.Table], bounds: dict[str, tuple[int, int]]) -> pa.Table:
    """Each cluster's decisions folded into at most MAX_POINTS buckets: the lowest factor and ratio of each."""
    decided = []
    for r in recs:
        r, t0, t1 = _with_bounds(r, bounds)
        decided.append(r.append_column("bucket", pa.array(_bucket(r.column("t_us").to_numpy(), t0, t1, MAX_POINTS))))
    return _aggregate(decided, ["cluster_id", "bucket"],
                      [("t_us", "min"), ("throttle_factor", "min"), ("fallback", "max"), ("min_available_ratio", "min")],
                      pa.schema([("cluster_id", pa.string()), ("bucket", pa.int64()), ("t_us", pa.int64()),
                                 ("throttle_factor", pa.float64()), ("fallback", pa.bool_()),
                                 ("min_available_ratio", pa.float64())]))


def _heat_and_lowest(files: Sequence[str], bounds: dict[str, tuple[int, int]],
                     settings: Settings) -> tuple[pa.Table, pd.DataFrame]:
    """The heat map (each broker's lowest ratio per column) and each log dir's lowest reading, in one read."""
    # Closest to the hard limit: by ratio or by bytes, as the limit is written; an offline reading has neither.
    by = "available_ratio" if settings.limits.hard.kind == "ratio" else "available_bytes"
    heat_parts, lowest_parts = [], []
    for v in _readings(files):
        v, t0, t1 = _with_bounds(v, bounds)
        if not v.num_rows:
            continue
        ratio = pc.fill_null(v.column("available_ratio"), 0.0)
        heat_parts.append(pa.table({"cluster_id": v.column("cluster_id"), "broker_id": v.column("broker_id"),
                                    "bucket": _bucket(v.column("t_us").to_numpy(), t0, t1, HEAT_COLUMNS),
                                    "min_ratio": ratio}))
        have = v.filter(pc.is_valid(v.column(by)))
        lowest_parts.append(have.select(["cluster_id", "broker_id", "log_dir", by]).rename_columns(
            ["cluster_id", "broker_id", "log_dir", "low"]))
    heat = _aggregate(heat_parts, ["cluster_id", "broker_id", "bucket"], [("min_ratio", "min")],
                      pa.schema([("cluster_id", pa.string()), ("broker_id", pa.int64()), ("bucket", pa.int64()),
                                 ("min_ratio", pa.float64())]))
    lowest = _aggregate(lowest_parts, ["cluster_id", "broker_id", "log_dir"], [("low", "min")],
                        pa.schema([("cluster_id", pa.string()), ("broker_id", pa.int64()), ("log_dir", pa.string()),
                                   ("low", pa.float64())])).to_pandas()
    return heat, lowest


def _worst(files: Sequence[str], bounds: dict[str, tuple[int, int]], lowest: pd.DataFrame) -> pa.Table:
    """The readings of each cluster's worst log dir (its lowest reading), folded into at most MAX_POINTS buckets."""
    worst_key = {c: (b, d) for c, b, d in lowest.sort_values(["cluster_id", "low", "broker_id", "log_dir"])
                 .drop_duplicates("cluster_id")[["cluster_id", "broker_id", "log_dir"]].itertuples(index=False)}
    worst_parts = []
    for v in _readings(files) if worst_key else ():
        picked = np.zeros(v.num_rows, bool)
        for c, (b, d) in worst_key.items():
            same = pc.and_(pc.and_(pc.equal(v.column("cluster_id"), c), pc.equal(v.column("broker_id"), b)),
                           pc.equal(v.column("log_dir"), d))
            picked |= pc.fill_null(same, False).to_numpy(zero_copy_only=False)
        if not picked.any():
            continue
        v, t0, t1 = _with_bounds(v.filter(pa.array(picked)), bounds)
        worst_parts.append(pa.table({
            "cluster_id": v.column("cluster_id"), "broker_id": v.column("broker_id"), "log_dir": v.column("log_dir"),
            "bucket": _bucket(v.column("t_us").to_numpy(), t0, t1, MAX_POINTS), "t_us": v.column("t_us"),
            "available_bytes": v.column("available_bytes"), "available_ratio": v.column("available_ratio"),
            "offline": pc.is_null(v.column("available_bytes"))}))
    return _aggregate(worst_parts, ["cluster_id", "broker_id", "log_dir", "bucket"],
                      [("t_us", "min"), ("available_bytes", "min"), ("available_ratio", "min"), ("offline", "max")],
                      pa.schema([("cluster_id", pa.string()), ("broker_id", pa.int64()), ("log_dir", pa.string()),
                                 ("bucket", pa.int64()), ("t_us", pa.int64()), ("available_bytes", pa.int64()),
                                 ("available_ratio", pa.float64()), ("offline", pa.bool_())]))


def _with_time(frame: pd.DataFrame) -> pd.DataFrame:
    frame["observed_at"] = pd.to_datetime(frame.pop("t_us"), unit="us", utc=True)
    return frame.sort_values(["cluster_id", "observed_at"]).reset_index(drop=True)
