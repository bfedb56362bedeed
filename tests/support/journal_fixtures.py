"""Journals written through the store, and what a reader sees in them (the Spark-free oracle of replay)."""
from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from quota_pipeline.core.model import UTC, PartitionSize, Status, Volume, VolumeSnapshot
from quota_pipeline.journal import layout
from quota_pipeline.journal.inputs import find_inputs
from quota_pipeline.journal.maintenance import ClusterJournal
from quota_pipeline.journal.period_file import SNAPSHOT_FIELDS, VOLUME_FIELDS
from quota_pipeline.core.snapshot_rules import parse_snapshot
from quota_pipeline.journal.store import Journal

T0 = dt.datetime(2026, 3, 1, tzinfo=UTC)
GB = 10 ** 9


def first_tick(interval_s: float, at: dt.datetime = T0) -> int:
    return int(at.timestamp() // interval_s)


def snapshot(tick: int, interval_s: float, cluster: str = "c1", brokers: int = 2, dirs: int = 2) -> VolumeSnapshot:
    """The snapshot polled for `tick`: observed a little after the tick starts; every 13th poll failed."""
    observed = layout.tick_start(tick, interval_s) + dt.timedelta(milliseconds=tick % 700)
    if tick % 13 == 0:
        return VolumeSnapshot(cluster, observed, Status.TIMEOUT, message="DescribeLogDirs timed out")
    volumes = tuple(Volume(b, f"/d{d}", 100 * GB, (tick * 7919 + b * 31 + d) % (100 * GB),
                           top_partitions=tuple(PartitionSize(f"t{b}", p, GB * (p + 1) + tick) for p in range(d)),
                           # the topics on the dir: not known in some polls (written before the field), none on /d0
                           topics=None if tick % 5 == 0 else tuple(sorted({f"t{b}", "shared"})) if d else ())
                    if (tick + b) % 17 else Volume(b, f"/d{d}", None, None, "KAFKA_STORAGE_ERROR")
                    for b in range(1, brokers + 1) for d in range(dirs))
    return VolumeSnapshot(cluster, observed, Status.SUCCESS, tuple(range(1, brokers + 1)), (), volumes)


def fill(journal: Journal, name: str, ticks, interval_s: float, **kw) -> dict[int, VolumeSnapshot]:
    """Journal one snapshot per tick, as the source does; returns what the journal holds per tick."""
    return {t: journal.write(name, t, layout.tick_start(t, interval_s), snapshot(t, interval_s, **kw))
            for t in ticks}


def cluster(root: Path, name: str = "a", interval_s: float = 10, period: dt.timedelta = dt.timedelta(hours=1),
            retention: dt.timedelta = dt.timedelta(days=30)) -> ClusterJournal:
    return ClusterJournal(str(root), name, dt.timedelta(seconds=interval_s), period, retention)


def _records_of_parquet(path: str) -> list[dict]:
    rows = pq.read_table(path).to_pylist()
    by_snapshot: dict[tuple, list[dict]] = {}
    for r in rows:
        by_snapshot.setdefault((r["cluster_id"], r["observed_at"], r.get("journal_file")), []).append(r)
    out = []
    for group in by_snapshot.values():
        first = group[0]
        record = {k: first[k] for k in SNAPSHOT_FIELDS if k in first and first[k] is not None}
        record["volumes"] = [{k: r.get(k) for k in VOLUME_FIELDS} for r in group if r["broker_id"] is not None]
        out.append(record)
    return out


def view(root: Path, rejects: list | None = None) -> list[VolumeSnapshot]:
    """Every snapshot a reader of `root` sees (replay's input discovery, then each line parsed, as replay
    does), in time order; fails on a snapshot seen twice, and on a line that is not a valid snapshot unless
    `rejects` collects (file, line number) of those."""
    inputs = find_inputs(str(root))
    assert inputs.unreadable == ()
    snaps = []
    for f in inputs.jsonl:
        for number, line in enumerate(Path(f).read_text().splitlines(), start=1):
            try:
                snaps.append(parse_snapshot(json.loads(line))) if line.strip() else None
            except ValueError:
                if rejects is None:
                    raise
                rejects.append((f, number))
    snaps += [parse_snapshot(r) for group in inputs.parquet for f in group for r in _records_of_parquet(f)]
    seen = Counter((s.cluster_id, s.observed_at) for s in snaps)
    assert [k for k, n in seen.items() if n > 1] == []
    return sorted(snaps, key=lambda s: (s.cluster_id, s.observed_at))


def files(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in Path(root).rglob(pattern) if p.is_file())
