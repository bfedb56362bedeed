"""Benchmark: batch replay of a large generated journal (default 10 million volume rows).

    python bench/replay_scale.py --brokers 100 --log-dirs 10 --snapshots 10000

Generates the journal once under bench/out/ (reused when present), then times `replay` end to end
(read + parse + set-based cache + decisions + write) on local[*], and prints rows per second.
"""
from __future__ import annotations

import argparse
import datetime as dt
import resource
import sys
import time
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from quota_pipeline.replay import job as replay
from quota_pipeline.journal import synth
from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.settings import Settings
from quota_pipeline.session import get_session


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--log-dirs", type=int, default=10)
    ap.add_argument("--snapshots", type=int, default=10_000)
    ap.add_argument("--offline-policy", default="pin", choices=["pin", "last-known", "violate"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "out"))
    ap.add_argument("--driver-memory", default="4g")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / f"journal-{args.brokers}x{args.log_dirs}x{args.snapshots}.jsonl"
    if not journal.exists():
        tmp = journal.with_suffix(".tmp")
        with Progress("generating", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()) as bar:
            task = bar.add_task("gen", total=args.snapshots)
            count = synth.large_journal(tmp, args.brokers, args.log_dirs, args.snapshots,
                                        progress=lambda i: bar.update(task, completed=i) if i % 100 == 0 else None)
        journal.with_suffix(".rows").write_text(str(count))
        tmp.rename(journal)
    rows = int(journal.with_suffix(".rows").read_text()) if journal.with_suffix(".rows").exists() \
        else args.brokers * args.log_dirs * args.snapshots
    settings = Settings(Limits(Limit("ratio", 0.05), Limit("ratio", 0.10)), dt.timedelta(minutes=5), 0.5,
                        args.offline_policy)
    spark = get_session("bench-replay", conf={"spark.driver.memory": args.driver_memory})
    started = time.monotonic()
    result = replay.run(spark, settings, str(journal), str(out / "decisions.parquet"))
    elapsed = time.monotonic() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"journal: {journal.name} ({journal.stat().st_size / 1e9:.2f} GB, {rows:,} volume rows)")
    print(f"replay: {result.records:,} decisions, {result.rejected} rejected, {elapsed:.1f} s, "
          f"{rows / elapsed / 1e6:.3f} M volume rows/s, driver python max RSS {rss:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
