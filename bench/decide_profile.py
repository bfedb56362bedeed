"""Benchmark: where the streaming job's stateful step spends its time per micro-batch, outside Spark.

    python3 -m bench.decide_profile --brokers 5 --log-dirs 100 --batches 20
    python3 -m bench.decide_profile --brokers 5 --log-dirs 100 --batches 20 --profile   # cProfile's top functions
    python3 -m bench.decide_profile --batches 100 --json    # the medians as JSON (bench/host.py's reference)

One cluster's snapshot rows, as the source emits them (`streaming/source.snapshot_rows`: one row per snapshot, its
log dirs packed, each with three top partitions), go through `DecisionProcessor` batch
after batch, its state carried in a dict as the state store would. Each batch's time is split into the parts of
`handleInputRows`: the rows flattened into the cluster pass's Arrow table, the state loaded, the compiled decision,
the output rows built, the state saved. Spark's own share of the decide stage (the shuffle, Arrow to rows, the
state store) is the decide stage of `bench/fleet_scale.py` minus these. The load average is printed: the machine is
shared.
"""
from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import json
import os
import pstats
import statistics
import sys
import time
from typing import Any, Callable

from pyspark.sql import Row

from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.model import PartitionSize, Status, Volume, VolumeSnapshot
from quota_pipeline.core.settings import Settings
from quota_pipeline.streaming import processor as proc
from quota_pipeline.streaming import source
from tests.support.builders import MemoryHandle

GB = 1 << 30
T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.timezone.utc)


def snapshot(tick: int, brokers: int, log_dirs: int, interval_s: float) -> VolumeSnapshot:
    """Every log dir a little fuller each tick, three top partitions each."""
    volumes = tuple(
        Volume(b, f"/data/{d}", 100 * GB, 60 * GB - tick * 10_000_000 - d * 1_000_000,
               top_partitions=tuple(PartitionSize(f"topic-{d % 7}", p, 1_000_000 * (p + 1)) for p in range(3)))
        for b in range(1, brokers + 1) for d in range(log_dirs))
    return VolumeSnapshot("c1", T0 + dt.timedelta(seconds=tick * interval_s), Status.SUCCESS,
                          tuple(range(1, brokers + 1)), (), volumes)


def timed(parts: dict[str, list[float]], name: str, fn: Callable) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            parts.setdefault(name, [0.0])[-1] += time.perf_counter() - t
    return wrapper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=5)
    ap.add_argument("--log-dirs", type=int, default=100, help="log dirs per broker")
    ap.add_argument("--batches", type=int, default=20, help="micro-batches, one snapshot each")
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between snapshots")
    ap.add_argument("--profile", action="store_true", help="also print cProfile's 25 costliest functions")
    ap.add_argument("--json", action="store_true", help="print only each part's median in ms, as JSON")
    args = ap.parse_args()
    if args.brokers < 1 or args.log_dirs < 1 or args.batches < 2:
        print("error: --brokers and --log-dirs at least 1, --batches at least 2", file=sys.stderr)
        return 2
    columns = [f.split()[0] for f in source.ROW_SCHEMA.split(", ")]
    frames = [[Row(**dict(zip(columns, r))) for r in source.snapshot_rows(
        "fleet", tick, snapshot(tick, args.brokers, args.log_dirs, args.interval))] for tick in range(args.batches)]
    settings = Settings(Limits(Limit("bytes", 10 * GB), Limit("bytes", 20 * GB)), dt.timedelta(minutes=5))
    parts: dict[str, list[float]] = {}
    for name in ("snapshot_table", "load_state", "save_state"):
        setattr(proc, name, timed(parts, name, getattr(proc, name)))
    proc.ClusterPass.decide = timed(parts, "decide (compiled steps)", proc.ClusterPass.decide)
    proc.DecisionProcessor._rows = timed(parts, "output rows", proc.DecisionProcessor._rows)
    processor = proc.DecisionProcessor({"fleet": settings}, {"fleet": "c1"})
    processor.init(MemoryHandle())
    load_before = os.getloadavg()
    profiler = cProfile.Profile() if args.profile else None
    totals = []
    for i, frame in enumerate(frames):
        for p in parts.values():
            p.append(0.0)
        if profiler and i == 1:
            profiler.enable()
        t = time.perf_counter()
        out = list(processor.handleInputRows(("c1",), iter(frame), None))
        totals.append(time.perf_counter() - t)
        assert len(out) == 1, "one record per batch"
    if profiler:
        profiler.disable()
    # The first batch (numba's compile, the first state) left out, and batches a part did not run in.
    measured = {name: [v * 1000 for v in values[1:] if v > 0] or [0.0]
                for name, values in [("handleInputRows", totals)] + sorted(parts.items())}
    if args.json:
        print(json.dumps({name: round(statistics.median(ms), 2) for name, ms in measured.items()}))
        return 0
    volumes = args.brokers * args.log_dirs
    print(f"one cluster, {volumes} log dirs, {args.batches} batches (the first, numba's compile and the first "
          f"state, left out); ms per batch, median (max):")
    for name, ms in measured.items():
        print(f"  {name:28} {statistics.median(ms):8.1f} ({max(ms):.1f})")
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
