"""Synthetic snapshot journals: the bundled example story and large journals for benchmarks."""
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
