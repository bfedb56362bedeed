"""Synthetic snapshot journals for tests and benchmarks: the example story and large generated journals."""
from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Iterator, TextIO

from quota_pipeline.core.model import TOP_PARTITIONS, PartitionSize, Status, Volume, VolumeSnapshot

GIB = 1024 ** 3


def example_story(start: dt.datetime, interval: dt.timedelta = dt.timedelta(seconds=30)) -> Iterator[VolumeSnapshot]:
    """Two clusters over 100 minutes, interleaved in time.

    prod-east (3 brokers x 2 dirs): broker 2's /data/1 fills past the 5% limit and is cleaned up;
    DescribeLogDirs then omits broker 3 for a while; then the admin calls time out for longer than
    the validity, and the cluster recovers. prod-west (4 brokers x 1 dir): a log dir goes offline
    (KAFKA_STORAGE_ERROR) and comes back after the disk is replaced; one broker is fenced meanwhile.
    """
    total = 100 * GIB
    for i in range(200):
        t = start + i * interval
        # prod-east
        if 160 <= i < 176:
            yield VolumeSnapshot("prod-east", t, Status.TIMEOUT, message="DescribeLogDirs timed out after 20s")
        else:
            vols = []
            for broker in (1, 2, 3):
                if 130 <= i < 150 and broker == 3:
                    continue
                for d in (0, 1):
                    free = 0.40 - 0.0005 * i
                    if broker == 2 and d == 1:
                        free = max(0.001, 0.40 - 0.006 * max(0, i - 20)) if i < 110 else 0.45
                    vols.append(Volume(broker, f"/data/{d}", total, int(total * free)))
            yield VolumeSnapshot("prod-east", t, Status.SUCCESS, (1, 2, 3), (), tuple(vols))
        # prod-west, observed 7s after prod-east
        tw = t + dt.timedelta(seconds=7)
        vols = []
        for broker in (11, 12, 13, 14):
            if broker == 13 and 80 <= i < 120:
                vols.append(Volume(broker, "/kafka", None, None, "KAFKA_STORAGE_ERROR"))
            elif broker == 13 and 60 <= i < 80:
                vols.append(Volume(broker, "/kafka", 2 * total, int(2 * total * max(0.0, 0.5 - 0.03 * (i - 60)))))
            else:
                vols.append(Volume(broker, "/kafka", 2 * total, int(2 * total * (0.6 - 0.001 * i))))
        fenced = (14,) if 90 <= i < 100 else ()
        brokers = tuple(b for b in (11, 12, 13, 14) if b not in fenced)
        yield VolumeSnapshot("prod-west", tw, Status.SUCCESS, brokers, fenced, tuple(vols))


def write_jsonl(snapshots: Iterator[VolumeSnapshot], out: TextIO) -> int:
    n = 0
    for snap in snapshots:
        out.write(json.dumps(snap.to_json(), separators=(",", ":")) + "\n")
        n += 1
    return n


def large_journal(path: Path, brokers: int, log_dirs: int, snapshots: int, seed: int = 1,
                  start: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                  interval: dt.timedelta = dt.timedelta(seconds=10), progress=None) -> int:
    """A single-cluster journal of brokers x log_dirs volumes per snapshot, written fast (no dataclasses).

    Disks fill and drain slowly; ~1% of polls fail, ~0.1% of readings are offline, some polls miss
    a broker: every branch of the decision is exercised at scale. Returns the volume row count.
    """
    rng = random.Random(seed)
    total = 1000 * GIB
    free = [[rng.uniform(0.05, 0.6) for _ in range(log_dirs)] for _ in range(brokers)]
    rows = 0
    broker_list = json.dumps(list(range(1, brokers + 1)))
    with path.open("w", encoding="utf-8") as out:
        for i in range(snapshots):
            t = (start + i * interval).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            if rng.random() < 0.01:
                out.write(f'{{"cluster_id":"bench","observed_at":"{t}","status":"TIMEOUT","brokers":[],'
                          f'"fenced_brokers":[],"volumes":[]}}\n')
                continue
            skip = rng.randrange(brokers) if rng.random() < 0.02 else -1
            parts = []
            for b in range(brokers):
                if b == skip:
                    continue
                for d in range(log_dirs):
                    f = free[b][d] = min(0.95, max(0.0, free[b][d] + rng.uniform(-0.004, 0.0039)))
                    if rng.random() < 0.001:
                        parts.append(f'{{"broker_id":{b + 1},"log_dir":"/d{d}","total_bytes":null,'
                                     f'"available_bytes":null,"error":"KAFKA_STORAGE_ERROR"}}')
                    else:
                        parts.append(f'{{"broker_id":{b + 1},"log_dir":"/d{d}","total_bytes":{total},'
                                     f'"available_bytes":{int(total * f)},"error":null}}')
                    rows += 1
            out.write(f'{{"cluster_id":"bench","observed_at":"{t}","status":"SUCCESS","brokers":{broker_list},'
                      f'"fenced_brokers":[],"volumes":[{",".join(parts)}]}}\n')
            if progress:
                progress(i + 1)
    return rows


def cluster_snapshots(brokers: int, log_dirs: int, start: dt.datetime, interval: dt.timedelta, count: int,
                      seed: int = 1, cluster: str = "bench", top: int = TOP_PARTITIONS) -> Iterator[VolumeSnapshot]:
    """One cluster's polls as the observer makes them (what the streaming job journals, tick by tick): the
    statistics of large_journal, and each online log dir with its `top` largest partitions, growing."""
    rng = random.Random(seed)
    total = 1000 * GIB
    free = [[rng.uniform(0.05, 0.6) for _ in range(log_dirs)] for _ in range(brokers)]
    parts = [[[(f"topic-{rng.randrange(200):03d}", rng.randrange(64), rng.randrange(GIB, 50 * GIB))
               for _ in range(top)] for _ in range(log_dirs)] for _ in range(brokers)]
    ids = tuple(range(1, brokers + 1))
    for i in range(count):
        t = start + i * interval
        if rng.random() < 0.01:
            yield VolumeSnapshot(cluster, t, Status.TIMEOUT, message="DescribeLogDirs timed out")
            continue
        skip = rng.randrange(brokers) if rng.random() < 0.02 else -1
        volumes = []
        for b in range(brokers):
            for d in range(log_dirs if b != skip else 0):
                f = free[b][d] = min(0.95, max(0.0, free[b][d] + rng.uniform(-0.004, 0.0039)))
                if rng.random() < 0.001:
                    volumes.append(Volume(b + 1, f"/d{d}", None, None, "KAFKA_STORAGE_ERROR"))
                    continue
                top = parts[b][d] = [(topic, p, size + rng.randrange(1 << 20)) for topic, p, size in parts[b][d]]
                largest = tuple(PartitionSize(*x) for x in sorted(top, key=lambda x: -x[2]))
                volumes.append(Volume(b + 1, f"/d{d}", total, int(total * f), top_partitions=largest))
        yield VolumeSnapshot(cluster, t, Status.SUCCESS, ids, (), tuple(volumes))


def flat_parquet_journal(path: Path, brokers: int = 10, log_dirs: int = 5, snapshots: int = 20_000,
                         failed: float = 0.05, seed: int = 1,
                         start: dt.datetime = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                         interval: dt.timedelta = dt.timedelta(seconds=10), chunk: int = 20_000,
                         progress=None, layout: str = "sorted", row_group: int = 1 << 20) -> int:
    """A single-cluster journal in the flattened Parquet form (one row per volume, a failed poll as one row
    without a volume), generated with numpy in chunks of `chunk` snapshots, so 100M rows fit in memory.

    Each log dir's free ratio is its own random walk folded into [0.30, 0.92] minus a cluster-wide one folded
    into [0, 0.32] (traffic that fills every disk at once and is cleaned up), so throttle episodes under a few %
    limits come and go; `failed` of the polls fail (TIMEOUT), ~2% miss a broker, ~0.1% of the readings are
    offline. Returns the row count.

    `layout` (LAYOUTS) is how the rows are written: "sorted" in time order, row groups of at most `row_group` rows
    within each chunk, every column dictionary-encoded (pyarrow's default); "exported" as another tool might export
    the same polls: the failed polls' rows appended at the end of the file, row groups of `row_group` rows whatever
    the chunks (the last one spans the whole time range), `log_dir` as plain (not dictionary-encoded) strings, the
    brokers list on every row (a failed poll's too). The same throttle decisions either way (a failed poll's
    record counts the brokers its row lists).
    """
    import numpy as np

    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    rng = np.random.default_rng(seed)
    walks = _FreeRatios(rng, brokers * log_dirs)
    fleet = _FlatFleet(brokers, log_dirs, int(start.timestamp() * 1e6), int(interval.total_seconds() * 1e6),
                       every_row_brokers=layout == "exported")
    rows = 0
    with _FlatWriter(path, fleet.schema, layout == "exported", row_group) as writer:
        for first in range(0, snapshots, chunk):
            n = min(chunk, snapshots - first)
            table = fleet.table(rng, walks.next(n), first, failed)
            writer.write(table)
            rows += table.num_rows
            if progress:
                progress(first + n)
    return rows


LAYOUTS = ("sorted", "exported")


class _FlatWriter:
    """flat_parquet_journal's Parquet file in either layout; "exported" holds the failed polls' rows (one per
    failed poll, a small part) until the end, and cuts row groups of `row_group` rows across the chunks."""

    def __init__(self, path: Path, schema, exported: bool, row_group: int):
        import pyarrow.parquet as pq

        plain = [f.name for f in schema if f.name != "log_dir"] if exported else True
        self.writer = pq.ParquetWriter(str(path), schema, compression="zstd", use_dictionary=plain)
        self.exported, self.row_group = exported, row_group
        self.pending, self.failed = [], []

    def __enter__(self) -> "_FlatWriter":
        return self

    def write(self, table) -> None:
        import pyarrow.compute as pc

        if not self.exported:
            self.writer.write_table(table, row_group_size=self.row_group)
            return
        is_failed = pc.is_null(table.column("broker_id"))
        self.failed.append(table.filter(is_failed))
        self._add(table.filter(pc.invert(is_failed)))

    def _add(self, table) -> None:
        import pyarrow as pa

        self.pending.append(table)
        held = pa.concat_tables(self.pending)
        whole = held.num_rows // self.row_group * self.row_group
        if whole:
            self.writer.write_table(held.slice(0, whole), row_group_size=self.row_group)
        self.pending = [held.slice(whole)]

    def __exit__(self, *exc) -> None:
        import pyarrow as pa

        if exc[0] is None and self.exported:
            self._add(pa.concat_tables(self.failed))
            rest = pa.concat_tables(self.pending)
            if rest.num_rows:
                self.writer.write_table(rest, row_group_size=self.row_group)
        self.writer.close()


class _FreeRatios:
    """flat_parquet_journal's free ratios: per log dir a bounded random walk, minus a cluster-wide dip."""

    LOW, HIGH, DEEPEST = 0.30, 0.92, 0.32

    def __init__(self, rng, n_vol: int):
        self.rng = rng
        self.walk = rng.uniform(0.0, 2 * (self.HIGH - self.LOW), n_vol)  # unfolded position of each walk
        self.dip = 0.0

    def next(self, n: int):
        """The free ratio of every log dir at the next n snapshots, shape (n, log dirs)."""
        import numpy as np

        # Steps biased slightly downwards (disks fill), folded back at both ends: a bounded random walk.
        steps = self.rng.uniform(-0.003, 0.0029, (n, len(self.walk)))
        pos = self.walk + np.cumsum(steps, axis=0)
        self.walk = pos[-1]
        span = self.HIGH - self.LOW
        folded = np.abs(np.mod(pos, 2 * span) - span)  # triangle wave in [0, span]
        shared = self.dip + np.cumsum(self.rng.uniform(-0.004, 0.004, n))
        self.dip = shared[-1]
        fill = np.abs(np.mod(shared, 2 * self.DEEPEST) - self.DEEPEST)
        return np.clip(self.HIGH - folded - fill[:, None], 0.0, 0.95)


class _FlatFleet:
    """flat_parquet_journal's cluster: its volumes, and a chunk of snapshots as flattened rows."""

    TOTAL = 1000 * GIB

    def __init__(self, brokers: int, log_dirs: int, start_us: int, step_us: int, every_row_brokers: bool = False):
        import numpy as np
        import pyarrow as pa

        self.brokers, self.start_us, self.step_us = brokers, start_us, step_us
        self.every_row_brokers = every_row_brokers  # a failed poll's row with the brokers list too
        self.broker_ids = np.repeat(np.arange(1, brokers + 1, dtype=np.int64), log_dirs)
        self.dir_names = np.tile(np.array([f"/d{d}" for d in range(log_dirs)], dtype=object), brokers)
        self.schema = pa.schema([
            ("cluster_id", pa.string()), ("observed_at", pa.string()), ("status", pa.string()),
            ("brokers", pa.list_(pa.int64())), ("fenced_brokers", pa.list_(pa.int64())),
            ("broker_id", pa.int64()), ("log_dir", pa.string()), ("total_bytes", pa.int64()),
            ("available_bytes", pa.int64()), ("error", pa.string()),
        ])

    def _rows(self, rng, n: int, failed: float):
        """(snapshot, volume or -1, offline) per row, snapshot by snapshot, a failed poll's single row in its
        place: `failed` of the polls fail, ~2% miss a broker, ~0.1% of the readings are offline."""
        import numpy as np

        ok = rng.random(n) >= failed
        skip = np.where(rng.random(n) < 0.02, rng.integers(0, self.brokers, n), -1)
        present = (self.broker_ids[None, :] - 1) != skip[:, None]
        offline = rng.random((n, len(self.broker_ids))) < 0.001
        present &= ok[:, None]
        snap_idx, vol_idx = np.nonzero(present)
        fail_idx = np.nonzero(~ok)[0]
        order_snap = np.concatenate([snap_idx, fail_idx])
        order_vol = np.concatenate([vol_idx, np.full(len(fail_idx), -1)])
        order = np.lexsort((order_vol, order_snap))
        s_idx, v_idx = order_snap[order], order_vol[order]
        return s_idx, v_idx, (v_idx >= 0) & offline[s_idx, np.where(v_idx >= 0, v_idx, 0)]

    def table(self, rng, free, first: int, failed: float):
        """Snapshots first .. first + len(free) as flattened rows."""
        import numpy as np
        import pyarrow as pa

        n = len(free)
        s_idx, v_idx, off = self._rows(rng, n, failed)
        is_vol = v_idx >= 0
        v_safe = np.where(is_vol, v_idx, 0)
        # One timestamp string per snapshot, repeated on its rows by index (formatting per row is slow).
        stamps = np.datetime_as_string((self.start_us + (first + np.arange(n)) * self.step_us)
                                       .astype("datetime64[us]"), unit="ms")
        m = len(s_idx)
        return pa.table({
            "cluster_id": pa.array(["bench"], pa.string()).take(pa.array(np.zeros(m, dtype=np.int64))),
            "observed_at": pa.array([f"{x}Z" for x in stamps], pa.string()).take(pa.array(s_idx)),
            "status": pa.array(["TIMEOUT", "SUCCESS"], pa.string()).take(pa.array(is_vol.astype(np.int64))),
            "brokers": _repeat_list(list(range(1, self.brokers + 1)), is_vol | self.every_row_brokers),
            "fenced_brokers": _repeat_list([], is_vol),
            "broker_id": pa.array(np.where(is_vol, self.broker_ids[v_safe], 0), pa.int64(), mask=~is_vol),
            "log_dir": pa.array(list(self.dir_names), pa.string()).take(pa.array(v_safe, mask=~is_vol)),
            "total_bytes": pa.array(np.full(m, self.TOTAL, dtype=np.int64), pa.int64(), mask=~is_vol | off),
            "available_bytes": pa.array((self.TOTAL * free[s_idx, v_safe]).astype(np.int64), pa.int64(),
                                        mask=~is_vol | off),
            "error": pa.array(["KAFKA_STORAGE_ERROR"], pa.string()).take(
                pa.array(np.zeros(m, dtype=np.int64), mask=~off)),
        }, schema=self.schema)


def _repeat_list(values: list[int], on):
    """A list column holding `values` where `on` is true and [] elsewhere, built without a Python list per row."""
    import numpy as np
    import pyarrow as pa

    k = len(values)
    lengths = np.where(on, k, 0)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat = np.tile(np.array(values, dtype=np.int64), int(on.sum())) if k else np.array([], dtype=np.int64)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int64()))
