"""`quota-pipeline replay`: batch decisions over a snapshot journal (what-if analysis)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from quota_pipeline.commands.common import add_config_argument, load_or_exit
from quota_pipeline.core.display import text as shown, visible


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a snapshot journal through the decision logic, in batch (on Spark, or this host's cores)",
        description="Replay snapshot journals (JSONL, optionally .gz, or flattened Parquet; a file or a "
                    "directory of them; clusters may be interleaved) through the same decision logic as the "
                    "streaming job. Writes one decision record per input snapshot, sorted by cluster then "
                    "observed_at, and prints how long each cluster was below factor 1 (stopped or throttled) "
                    "and why. Lines that are not valid snapshots are counted, reported with file and line, and "
                    "written to OUT.rejected. "
                    "--sweep decides the same snapshots under several values of one limit, the validity or the "
                    "fallback in the same run; --report draws it all into one HTML file.",
    )
    add_config_argument(p, "the .properties file whose limits, validity and fallback to apply "
                           "(kafka.admin.bootstrap.servers is not needed for replay)")
    p.add_argument("--input", required=True, metavar="PATH", help="journal file or directory")
    p.add_argument("--output", required=True, metavar="OUT",
                   help="decisions: OUT ending in .jsonl gives one JSON line per record, anything else a "
                        "Parquet directory")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 1, no output) when any input line is rejected")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...",
                   help="what-if: also decide every snapshot under each value of one property, over the same read "
                        "of the journal, and print per value the time limited (stopped or throttled), episodes, "
                        "longest episode, time in fallback and the least available ratio while open (also written "
                        "to OUT.sweep.json), with the time stopped (factor 0), the least headroom above the hard "
                        "limit read and the bytes deferred (sum of (1 - factor) x the bytes the log dirs grew by). "
                        "KEY: storage.per.volume.limit.min.available.ratio|bytes, "
                        "storage.per.volume.soft.limit.min.available.ratio|bytes, throttle.factor.validity.duration, "
                        "throttle.factor.fallback, storage.per.volume.eta.horizon or storage.per.volume.eta.window "
                        "(the client.quota.callback.static. prefix may be left out); "
                        "a limit value replaces the configured limit of the same rank. OUT still holds the "
                        "decisions of CONF's own settings")
    p.add_argument("--report", metavar="FILE.html",
                   help="also write a self-contained HTML report (matplotlib charts embedded): the factor over "
                        "time with throttle episodes shaded, the log dir closest to the hard limit against the "
                        "limit lines, a per-broker heat map of the least available ratio, and the sweep "
                        "comparison with --sweep (needs matplotlib: pip install 'quota-pipeline[charts]')")
    p.add_argument("--master", default=None, help="run on Spark with this master (local[N], or a cluster's: "
                   "spark://, yarn, k8s://, which runs the replay there); without it no Spark starts")
    p.add_argument("--engine", choices=("auto", "local", "spark"), default="auto",
                   help="who runs the clusters' tasks: 'local', this host's processes (one per core) without starting "
                        "Spark, for any journal (JSONL, tick files, Parquet), OUT, --sweep and --report; 'spark', "
                        "Spark's tasks (local[*], or another host's cores with --master); 'auto' (default) is local "
                        "unless a --master is given. Both run the same checks and tasks: the records are the same")
    p.add_argument("--driver-memory", default="2g",
                   help="with Spark (--engine spark or --master): memory of the local Spark driver's JVM "
                        "(default 2g). The records never pass through it: "
                        "each cluster's task reads, decides and writes in Python, a million rows at a time, so "
                        "100M rows replay in 2g (about 2.3 GiB of Python memory on top)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    conf = load_or_exit(args.config, require_admin=False)
    from quota_pipeline.core.settings import Settings
    from quota_pipeline.journal.inputs import find_inputs
    from quota_pipeline.replay import kernel_form

    try:
        staged = _staged(args)  # noqa: F841 - an s3:// journal's local copy, kept until the command ends
        sweep = _checked(args, conf)
        engine = _engine(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with kernel_form.importing(engine == "local" and kernel_form.python_form(find_inputs(args.input))):
        from quota_pipeline.replay import job as replay
    settings = Settings.of(conf)
    started = time.monotonic()
    spark = None
    if engine == "spark":
        from quota_pipeline.session import get_session

        say(f"replay {args.input} -> {args.output} (starting Spark)")
        spark = get_session("quota-pipeline-replay", master=args.master,
                            conf={"spark.driver.memory": args.driver_memory})
    else:
        say(f"replay {args.input} -> {args.output} (on this host's {os.cpu_count() or 1} core(s), without Spark)")
    result = replay.run(spark, settings, args.input, args.output, strict=args.strict,
                        cluster_name=conf.cluster_name, sweep=sweep, report=args.report is not None)
    if result.rejected:
        say(f"rejected {result.rejected} input line(s), written to {result.rejected_path}:")
        for r in result.first_rejections:
            say(f"  {r['file']}:{r['line']}: {r['reason']}")
        if result.rejected > len(result.first_rejections):
            say(f"  ... and {result.rejected - len(result.first_rejections)} more")
        if args.strict:
            say("error: --strict: input lines were rejected, no output written")
            return 1
    _print_summary(result, time.monotonic() - started, args.output, sweep)
    if args.report is not None:
        from quota_pipeline.replay import report

        Path(args.report).write_text(report.render(result.report, result.sweep, f"Replay of {args.input}"),
                                     encoding="utf-8")
        say(f"report written to {args.report}")
    return 0


def _engine(args: argparse.Namespace) -> str:
    """'local' or 'spark' for --engine (auto: Spark only when a --master is given); a local engine asked to run
    on another host's master is a _UsageError."""
    if args.engine == "local":
        if args.master and not args.master.startswith("local"):
            raise _UsageError(f"--engine local runs on this host, not on --master {args.master}; leave one out")
        return "local"
    return "spark" if args.engine == "spark" or args.master else "local"


class _UsageError(Exception):
    """A replay option that cannot work, in one line saying what to do (exit code 2)."""


def _staged(args: argparse.Namespace):
    """An s3:// --input copied to a local directory (journal/object_storage.download), which then replaces it."""
    if not args.input.startswith("s3://"):
        return None
    import tempfile

    from quota_pipeline.journal import object_storage
    from quota_pipeline.journal.objstore import ObjectStoreError

    staged = tempfile.TemporaryDirectory(prefix="quota-pipeline-replay-")
    try:
        n = object_storage.download(args.input, Path(staged.name))
    except ObjectStoreError as exc:
        staged.cleanup()
        raise _UsageError(f"--input: {exc}") from None
    say(f"copied {n} journal file(s) from {args.input} to {staged.name}")
    args.input = staged.name
    return staged


def _checked(args: argparse.Namespace, conf):
    """The --sweep to run (None without one), once the input, the sweep and the report path are usable: checked
    before Spark starts, not after the replay. A _UsageError says what to do."""
    from quota_pipeline.journal import inputs as journal

    try:
        journal.find_inputs(args.input)
    except journal.JournalInputError as exc:
        raise _UsageError(str(exc)) from None
    sweep = None
    if args.sweep is not None:
        from quota_pipeline.replay import sweep as sweeps
        try:
            sweep = sweeps.parse(args.sweep, conf)
        except sweeps.SweepError as exc:
            raise _UsageError(str(exc)) from None
    if args.report is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _UsageError("--report needs matplotlib: python3 -m pip install 'quota-pipeline[charts]'") from None
        # Made like OUT's directory, before Spark starts, so that a path that cannot be written fails at once.
        try:
            Path(args.report).resolve().parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _UsageError(f"--report {args.report}: cannot create its directory ({exc.strerror}); "
                             "pick another path") from None
    return sweep


def _print_summary(result, elapsed: float, output: str, sweep) -> None:
    """Per cluster: snapshots, period, time limited (stopped or throttled) and in fallback, episodes; the sweep."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=shown(f"{result.records} decisions in {elapsed:.1f}s -> {output}"))
    for col in ("cluster", "snapshots", "period (UTC)", "limited", "fallback", "episodes", "max viol.",
                "failed polls"):
        table.add_column(col, no_wrap=True, min_width=len(col))
    for row in result.clusters:
        table.add_row(shown(row["cluster_id"]), str(row["snapshots"]), _period(row["first_us"], row["last_us"]),
                      _duration(row["throttled_s"]), _duration(row["fallback_s"]), str(row["episodes"]),
                      str(row["max_violations"]), str(row["failed_polls"]))
    console = Console(width=max(130, Console().width))
    console.print(table)
    if sweep is not None:
        console.print(sweep_table(result.sweep, result.sweep_path))


def _period(first_us: int, last_us: int) -> str:
    from quota_pipeline.core.model import from_epoch_micros

    return " .. ".join(f"{from_epoch_micros(t):%Y-%m-%d %H:%M}" for t in (first_us, last_us))


def sweep_table(rows, path: str | None):
    """The sweep as a rich table: one row per cluster and value."""
    from rich.table import Table

    key = rows[0].key.removeprefix("client.quota.callback.static.") if rows else "setting"
    table = Table(title=shown(f"what-if sweep of {key} (also in {path})"))
    for col in ("cluster", "value", "limited", "stopped", "episodes", "longest episode", "fallback",
                "least avail. open", "least headroom", "deferred"):
        table.add_column(col, no_wrap=True, min_width=len(col), justify="left" if col == "cluster" else "right")
    for r in rows:
        table.add_row(shown(r.cluster_id), shown(r.value), _duration(r.throttled_s), _duration(r.stopped_s),
                      str(r.episodes), _duration(r.longest_episode_s), _duration(r.fallback_s),
                      "-" if r.min_ratio_unthrottled is None else f"{r.min_ratio_unthrottled:.2%}",
                      gib(r.least_headroom_bytes), gib(r.deferred_bytes))
    return table


def gib(n: float | None) -> str:
    """Bytes as GiB with one decimal (a sweep's headroom and deferred bytes); "-" for none."""
    return "-" if n is None else f"{n / 1024 ** 3:,.1f} GiB"


def say(line: str) -> None:
    """Progress and problems go to stderr as plain lines (greppable, never re-wrapped), control characters visible."""
    print(visible(line), file=sys.stderr, flush=True)


def _duration(seconds: float | None) -> str:
    seconds = int(seconds or 0)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s" if seconds else "-"
