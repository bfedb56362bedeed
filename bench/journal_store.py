"""Benchmark: the journal on an object store (S3Proxy on loopback) against the local disk, same polls, same run.

    python3 -m bench.journal_store --brokers 10 --log-dirs 4 --interval 5 --hours 2 [--spark]

For each store, in turn: `write` journals every poll through Journal.write (a tick file each, first writer wins:
link on a disk, If-None-Match PUT on the store), `compact` runs the driver's maintenance pass once every period has
closed (period files, tick files deleted), `replay read` is what replay reads before deciding: on the store the
copy to a local directory (journal/object_storage.download, as `replay --input s3://...` does) plus reading every
snapshot from the files, on the disk the reading alone. Reads are timed before compaction (tick files) and after
(period files). With --spark, replay.run itself (the decisions, local Spark; the store's journal copied first) over
each journal after compaction, once both are written, after an untimed warm-up replay.
S3Proxy (harness/s3proxy.py: org.gaul:s3proxy from Maven Central) keeps its objects on the same local disk.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path


T0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)


def read_all(root: Path) -> int:
    """Every snapshot under a local journal, parsed as replay's reader finds them (tick files, period files)."""
    import pyarrow.parquet as pq

    from quota_pipeline.journal.inputs import find_inputs
    from quota_pipeline.core.snapshot_rules import parse_snapshot

    inputs = find_inputs(str(root))
    n = 0
    for f in inputs.jsonl:
        for line in Path(f).read_text().splitlines():
            if line.strip():
                parse_snapshot(json.loads(line))
                n += 1
    for group in inputs.parquet:
        for f in group:
            table = pq.read_table(f, columns=["observed_at", "broker_id"])
            n += len(set(table.column("observed_at").to_pylist()))
    return n


def replay_read(root: str, scratch: Path) -> tuple[int, int]:
    """(files copied, snapshots read): the object store's journal is copied first, as replay does."""
    from quota_pipeline.journal import object_storage

    if not root.startswith("s3://"):
        return 0, read_all(Path(root))
    local = Path(tempfile.mkdtemp(dir=scratch, prefix="copy-"))
    return object_storage.download(root, local), read_all(local)


def timed(fn, *args):
    started = time.monotonic()
    out = fn(*args)
    return time.monotonic() - started, out


def run_store(name: str, root: str, polls: list, interval_s: float, hours: int, scratch: Path) -> dict:
    from quota_pipeline.journal import layout
    from quota_pipeline.journal.maintenance import ClusterJournal, run_pass
    from quota_pipeline.journal.store import Journal

    journal, first = Journal(root), int(T0.timestamp() // interval_s)

    def write() -> None:
        for i, snap in enumerate(polls):
            journal.write("bench", first + i, layout.tick_start(first + i, interval_s), snap)

    out = {"store": name}
    out["write_s"], _ = timed(write)
    out["read_ticks_s"], (out["copied_ticks"], out["snapshots_ticks"]) = timed(replay_read, root, scratch)
    cj = ClusterJournal(root, "bench", dt.timedelta(seconds=interval_s), dt.timedelta(hours=1), dt.timedelta(0))
    out["compact_s"], report = timed(run_pass, cj, T0 + dt.timedelta(hours=hours, minutes=5))
    out["compacted"] = sum(r.added for r in report.rewritten)
    out["problems"] = list(report.problems)
    out["read_periods_s"], (out["copied_periods"], out["snapshots_periods"]) = timed(replay_read, root, scratch)
    return out


def spark_replay(spark, root: str, scratch: Path) -> int:
    """replay.run over the journal (an s3:// one copied first, as the command does), decisions counted."""
    from quota_pipeline.core.config import Limit, Limits
    from quota_pipeline.core.settings import Settings
    from quota_pipeline.journal import object_storage
    from quota_pipeline.replay import job as replay

    if root.startswith("s3://"):
        local = Path(tempfile.mkdtemp(dir=scratch, prefix="replay-copy-"))
        object_storage.download(root, local)
        root = str(local)
    settings = Settings(Limits(Limit("ratio", 0.05), Limit("ratio", 0.10)), dt.timedelta(minutes=5), 0.5, "pin")
    out = Path(tempfile.mkdtemp(dir=scratch, prefix="replay-out-")) / "decisions.parquet"
    return replay.run(spark, settings, root, str(out)).records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=10)
    parser.add_argument("--log-dirs", type=int, default=4)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls")
    parser.add_argument("--hours", type=int, default=2, help="hours of polls (each a period to compact)")
    parser.add_argument("--spark", action="store_true", help="also time replay.run (local Spark) per store")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    from harness import synthetic_journals
    from harness.s3proxy import ENV, s3proxy_classpath, serve

    load_at_start = os.getloadavg()
    count = int(args.hours * 3600 / args.interval)
    polls = list(synthetic_journals.cluster_snapshots(args.brokers, args.log_dirs, T0, dt.timedelta(seconds=args.interval), count))
    scratch = Path(tempfile.mkdtemp(prefix="bench-journal-store-"))
    lib = s3proxy_classpath()
    (scratch / "s3proxy").mkdir()
    with serve(scratch / "s3proxy", lib) as server:
        os.environ.update({**ENV, "AWS_ENDPOINT_URL": server.endpoint})
        spark = None
        if args.spark:
            from quota_pipeline.session import get_session

            spark = get_session("bench-journal-store", conf={"spark.ui.showConsoleProgress": "false"})
            spark.range(1).count()  # the session is up before any clock starts
        roots = {"local disk": str(scratch / "journal"), "S3Proxy (loopback)": server.uri("journal")}
        rows = [run_store(name, root, polls, args.interval, args.hours, scratch) for name, root in roots.items()]
        if spark is not None:
            spark_replay(spark, roots["local disk"], scratch)  # warm-up: JIT, numba's kernel, Spark's code paths
            for row in rows:
                row["replay_s"], row["decisions"] = timed(spark_replay, spark, roots[row["store"]], scratch)
    load = os.getloadavg()
    print(f"{count} polls of {args.brokers} brokers x {args.log_dirs} log dirs every {args.interval:g} s "
          f"({args.hours} h, {args.hours} periods); {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"load average (1/5/15 min) {load_at_start[0]:.1f} {load_at_start[1]:.1f} {load_at_start[2]:.1f} at the "
          f"start, {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
    cols = ["| store | write (ticks/s) | replay read, tick files (snapshots/s) | compaction (s, ticks/s) "
            "| replay read, period files (snapshots/s) |" + (" replay.run (s) |" if args.spark else ""),
            "|---|---|---|---|---|" + ("---|" if args.spark else "")]
    for r in rows:
        line = (f"| {r['store']} | {count / r['write_s']:,.0f} ({r['write_s']:.1f} s) "
                f"| {r['snapshots_ticks'] / r['read_ticks_s']:,.0f} ({r['read_ticks_s']:.1f} s) "
                f"| {r['compact_s']:.1f} s, {r['compacted'] / r['compact_s']:,.0f} "
                f"| {r['snapshots_periods'] / r['read_periods_s']:,.0f} ({r['read_periods_s']:.2f} s) |")
        if args.spark:
            line += f" {r['replay_s']:.1f} ({r['decisions']:,} decisions) |"
        print(line)
        if r["problems"] or r["snapshots_ticks"] != count or r["snapshots_periods"] != count \
                or r["compacted"] != count:
            print(f"  {r['store']}: UNEXPECTED: {r}")
    if args.json:
        Path(args.json).write_text(json.dumps({"count": count, "load_at_start": load_at_start, "load": load,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
