"""`quota-pipeline replay`: batch decisions over a snapshot journal (what-if analysis)."""
from __future__ import annotations

import argparse
import sys
import time

from quota_pipeline.commands.common import load_or_exit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a snapshot journal through the decision logic, in batch on Spark",
        description="Replay snapshot journals (JSONL, optionally .gz, or flattened Parquet; a file or a "
                    "directory of them; clusters may be interleaved) through the same decision logic as the "
                    "streaming job. Writes one decision record per input snapshot, sorted by cluster then "
                    "observed_at, and prints how long each cluster was throttled and why. Lines that are not "
                    "valid snapshots are counted, reported with file and line, and written to OUT.rejected.",
    )
    p.add_argument("--config", required=True, metavar="CONF",
                   help="the .properties file whose limits, validity and fallback to apply "
                        "(kafka.admin.bootstrap.servers is not needed for replay)")
    p.add_argument("--input", required=True, metavar="PATH", help="journal file or directory")
    p.add_argument("--output", required=True, metavar="OUT",
                   help="decisions: OUT ending in .jsonl gives one JSON line per record, anything else a "
                        "Parquet directory")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 1, no output) when any input line is rejected")
    p.add_argument("--master", default=None, help="Spark master (default local[*])")
    p.add_argument("--driver-memory", default="2g",
                   help="memory of the local Spark driver, which also runs the tasks in local mode (default 2g; "
                        "a year of 10 s snapshots of 100 brokers wants 8g or a cluster)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    conf = load_or_exit(args.config, require_admin=False)
    from rich.console import Console
    from rich.table import Table

    from quota_pipeline.journal import spark_reader as journal
    from quota_pipeline.replay import job as replay
    from quota_pipeline.core.settings import Settings
    from quota_pipeline.session import get_session

    try:
        journal.find_inputs(args.input)
    except journal.JournalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    say(f"replay {args.input} -> {args.output} (starting Spark)")
    spark = get_session("quota-pipeline-replay", master=args.master,
                        conf={"spark.driver.memory": args.driver_memory})
    result = replay.run(spark, Settings.of(conf), args.input, args.output, strict=args.strict,
                        cluster_name=conf.cluster_name)
    if result.rejected:
        say(f"rejected {result.rejected} input line(s), written to {result.rejected_path}:")
        for r in result.first_rejections:
            say(f"  {r['file']}:{r['line']}: {r['reason']}")
        if result.rejected > len(result.first_rejections):
            say(f"  ... and {result.rejected - len(result.first_rejections)} more")
        if args.strict:
            say("error: --strict: input lines were rejected, no output written")
            return 1
    elapsed = time.monotonic() - started
    records = spark.read.json(args.output) if args.output.endswith(".jsonl") else spark.read.parquet(args.output)
    if args.output.endswith(".jsonl"):
        from pyspark.sql import functions as F
        records = records.withColumn("observed_at", F.to_timestamp("observed_at"))
    table = Table(title=f"{result.records} decisions in {elapsed:.1f}s -> {args.output}")
    for col in ("cluster", "snapshots", "period (UTC)", "throttled", "fallback", "episodes", "max viol.",
                "failed polls"):
        table.add_column(col, no_wrap=True, min_width=len(col))
    for row in replay.summary_table(records):
        table.add_row(row["cluster_id"], str(row["snapshots"]), row["period"],
                      _duration(row["throttled_s"]), _duration(row["fallback_s"]), str(row["episodes"]),
                      str(row["max_violations"]), str(row["failed_polls"]))
    Console(width=max(130, Console().width)).print(table)
    return 0


def say(line: str) -> None:
    """Progress and problems go to stderr as plain lines (greppable, never re-wrapped)."""
    print(line, file=sys.stderr, flush=True)


def _duration(seconds: float | None) -> str:
    seconds = int(seconds or 0)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s" if seconds else "-"
