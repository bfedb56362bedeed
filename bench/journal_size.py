"""Benchmark: the snapshot journal's disk use per day before and after compaction, and replay of tick files.

    python3 -m bench.journal_size size --brokers 100 --log-dirs 10 --interval 10
    python3 -m bench.journal_size ticks --brokers 6 --log-dirs 2 --interval 1 --count 7200 --out DIR
    python3 -m bench.journal_size replay DIR
    python3 -m bench.journal_size flat --brokers 6 --log-dirs 2 --interval 1 --hours 24 --retention PT1H

`size` journals one simulated hour through the store (Journal.write, one tick file per poll, as the streaming
job does; polls from harness/synthetic_journals.py cluster_snapshots), measures it, compacts it with the job's own pass and
measures again; x24 is a day. `ticks` writes a directory of tick files; `replay` times `replay.run` over it
(only replay's modules are imported, so that an older checkout can time the same directory). `flat` runs a
day compressed in time: the store journals every tick and the job's pass runs every simulated minute on a
manual clock (retention as given), and the journal's size is printed every simulated hour.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def disk_use(root: Path, hours: int = 1, per: int = 24) -> tuple[int, int, int]:
    """(files, apparent bytes, allocated bytes) under root, the snapshots' files scaled from `hours` to `per`
    hours; the cluster's own small files (_cluster_id, _periods, _lock) counted once."""
    files = apparent = allocated = 0.0
    for dirpath, _, names in os.walk(root):
        for name in names:
            st = os.stat(os.path.join(dirpath, name))
            scale = 1 if name.startswith("_") else per / hours
            files += scale
            apparent += st.st_size * scale
            allocated += st.st_blocks * 512 * scale
    return round(files), round(apparent), round(allocated)


def write_ticks(root: Path, brokers: int, log_dirs: int, interval_s: float, count: int, top: int) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from harness import synthetic_journals
    from quota_pipeline.journal import layout
    from quota_pipeline.journal.store import Journal

    journal = Journal(str(root))
    first = int(T0.timestamp() // interval_s)
    polls = synthetic_journals.cluster_snapshots(brokers, log_dirs, T0, dt.timedelta(seconds=interval_s), count, top=top)
    with Progress("journaling", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task("ticks", total=count)
        for i, snap in enumerate(polls):
            tick = first + i
            journal.write("bench", tick, layout.tick_start(tick, interval_s), snap)
            bar.advance(task)


def size(args: argparse.Namespace) -> int:
    from quota_pipeline.journal.maintenance import ClusterJournal, run_pass

    root = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    count = int(3600 / args.interval)
    write_ticks(root, args.brokers, args.log_dirs, args.interval, count, args.top_partitions)
    before = disk_use(root)
    cj = ClusterJournal(str(root), "bench", dt.timedelta(seconds=args.interval), dt.timedelta(hours=1),
                        dt.timedelta(0))
    cpu, wall = time.process_time(), time.monotonic()
    report = run_pass(cj, T0 + dt.timedelta(hours=2))
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    after = disk_use(root)
    print(f"one hour: {args.brokers} brokers x {args.log_dirs} log dirs every {args.interval:g} s = {count} polls "
          f"({args.top_partitions} top partitions per log dir), {sum(r.added for r in report.rewritten)} compacted; "
          f"compaction {wall:.1f} s ({cpu:.1f} s CPU)")
    print("| form | files per day | MB per day (file sizes) | MB per day (allocated) |")
    print("|---|---|---|---|")
    for name, (files, apparent, allocated) in (("tick files (before)", before), ("period files (after)", after)):
        print(f"| {name} | {files:,} | {apparent / 1e6:,.1f} | {allocated / 1e6:,.1f} |")
    print(f"ratio: {before[1] / after[1]:.0f}x (file sizes), {before[2] / after[2]:.0f}x (allocated); kept in {root}")
    return 0


def ticks(args: argparse.Namespace) -> int:
    write_ticks(Path(args.out), args.brokers, args.log_dirs, args.interval, args.count, args.top_partitions)
    files, apparent, _ = disk_use(Path(args.out), per=1)
    print(f"{files} files, {apparent / 1e6:.1f} MB in {args.out}")
    return 0


def replay_dir(args: argparse.Namespace) -> int:
    from quota_pipeline.core.config import Limit, Limits
    from quota_pipeline.core.settings import Settings
    from quota_pipeline.replay import job as replay
    from quota_pipeline.session import get_session

    settings = Settings(Limits(Limit("ratio", 0.05), Limit("ratio", 0.10)), dt.timedelta(minutes=5), 0.5, "pin")
    spark = get_session("bench-journal-replay", conf={"spark.ui.showConsoleProgress": "false"})
    out = Path(tempfile.mkdtemp(prefix="bench-journal-replay-")) / "decisions.parquet"
    spark.range(1).count()  # the session is up before the clock starts
    started = time.monotonic()
    result = replay.run(spark, settings, args.dir, str(out))
    elapsed = time.monotonic() - started
    print(f"replay of {args.dir}: {result.records:,} decisions, {result.rejected} rejected, {elapsed:.1f} s")
    return 0


def flat(args: argparse.Namespace) -> int:
    import isodate

    from quota_pipeline.core.clock import ManualClock
    from harness import synthetic_journals
    from quota_pipeline.journal import layout
    from quota_pipeline.journal.maintenance import ClusterJournal, run_pass
    from quota_pipeline.journal.store import Journal

    root = Path(tempfile.mkdtemp(prefix="bench-journal-flat-"))
    journal, clock = Journal(str(root)), ManualClock(T0)
    interval = dt.timedelta(seconds=args.interval)
    cj = ClusterJournal(str(root), "bench", interval, dt.timedelta(hours=1), isodate.parse_duration(args.retention))
    first, per_pass = int(T0.timestamp() // args.interval), max(1, int(60 / args.interval))
    count, biggest, started = int(args.hours * 3600 / args.interval), (0, 0), time.monotonic()
    print("| simulated hour | files | MB | largest so far (files, MB) |\n|---|---|---|---|")
    polls = synthetic_journals.cluster_snapshots(args.brokers, args.log_dirs, T0, interval, count)
    for i, snap in enumerate(polls):
        journal.write("bench", first + i, layout.tick_start(first + i, args.interval), snap)
        clock.advance(args.interval)
        if (i + 1) % per_pass == 0:
            u = run_pass(cj, clock.now()).usage
            biggest = max(biggest, (u.files, u.bytes))
            if (i + 1) % int(3600 / args.interval) == 0:
                print(f"| {(i + 1) * args.interval / 3600:.0f} | {u.files:,} | {u.bytes / 1e6:.1f} | "
                      f"{biggest[0]:,}, {biggest[1] / 1e6:.1f} |", flush=True)
    print(f"{count:,} ticks of {args.brokers}x{args.log_dirs} log dirs every {args.interval:g} s, retention "
          f"{args.retention}, a pass a simulated minute: {time.monotonic() - started:.0f} s; kept in {root}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("size", "ticks", "flat"):
        p = sub.add_parser(name)
        p.add_argument("--brokers", type=int, default=100)
        p.add_argument("--log-dirs", type=int, default=10)
        p.add_argument("--interval", type=float, default=10.0, help="check interval in seconds")
        p.add_argument("--top-partitions", type=int, default=5, help="largest partitions journaled per log dir "
                       "(the observer keeps 5; 0 = a journal of record version 1)")
        if name == "ticks":
            p.add_argument("--count", type=int, default=7200)
            p.add_argument("--out", required=True)
        if name == "flat":
            p.add_argument("--hours", type=float, default=24)
            p.add_argument("--retention", default="PT1H", help="ISO-8601, as quota.pipeline.journal.retention")
    sub.add_parser("replay").add_argument("dir")
    args = ap.parse_args()
    return {"size": size, "ticks": ticks, "flat": flat, "replay": replay_dir}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
