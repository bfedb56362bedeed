"""`quota-pipeline journal stats|compact|prune`: the snapshot journal for operators (the job's own passes)."""
from __future__ import annotations

import argparse
import json
import sys

from quota_pipeline.commands.common import EXIT_CONFIG, add_config_argument, fail, load_or_exit
from quota_pipeline.core.display import markup, text as shown, visible

LOCK_WAIT_S = 60.0
ACTIONS = {
    "stats": ("size, files, periods and the oldest and newest snapshot per cluster",
              "Show, per cluster, the journal's bytes and files, its compacted and open periods and its oldest "
              "and newest snapshot. Reads only; safe while the streaming job runs."),
    "compact": ("compact closed periods now (the job does it in the background)",
                "Rewrite every closed period (quota.pipeline.journal.period; a period closes a minute or three "
                "check intervals after its end) as one time-sorted Parquet file per cluster, then delete its "
                "tick files. Safe while the streaming job runs and safe to interrupt at any point."),
    "prune": ("delete periods past retention now (the job does it in the background)",
              "Delete every whole period that ended longer ago than quota.pipeline.journal.retention (PT0S keeps "
              "everything), in whatever form it is. Safe while the streaming job runs."),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "journal", help="snapshot journal: stats, compaction and retention on demand",
        description="The snapshot journal the streaming job writes (one JSON file per cluster and tick, closed "
                    "periods compacted to one Parquet file each, periods past retention deleted). These are the "
                    "job's own maintenance passes, run on demand.")
    actions = p.add_subparsers(dest="journal_action", metavar="ACTION", required=True)
    for name, (short, long) in ACTIONS.items():
        a = actions.add_parser(name, help=short, description=long)
        add_config_argument(a, "the cluster's .properties file (its journal path, check interval, period and "
                               "retention); several for more clusters", many=True)
        if name == "stats":
            a.add_argument("--json", action="store_true", help="print JSON instead of a table")
        else:
            a.add_argument("--dry-run", action="store_true", help="print what would be done, do nothing")
        a.set_defaults(func=run)


def clusters_of(paths: list[str]):
    """The clusters' journals, or one error line per problem and exit code 2."""
    from quota_pipeline.core.names import UnsafePath
    from quota_pipeline.journal.maintenance import ClusterJournal, period_problem
    from quota_pipeline.journal.storage import UnsupportedJournalPath
    from quota_pipeline.streaming.source import config_name

    confs = [load_or_exit(p, require_admin=False) for p in paths]
    problems = [period_problem(c) for c in confs if period_problem(c)]
    problems += [f"error: {c.path}: the storage check interval is 0, so the journal's ticks have no time; set "
                 f"the check interval the job ran with" for c in confs if c.check_interval.total_seconds() <= 0]
    clusters = [ClusterJournal.of(c, config_name(c)) for c in confs]
    for conf, c in zip(confs, clusters):
        try:
            c.storage.checked(c.name)
        except UnsupportedJournalPath as exc:
            problems.append(f"error: {conf.path}: {exc}")
        except UnsafePath as exc:
            problems.append(f"error: {exc}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)
    return clusters


def run(args: argparse.Namespace) -> int:
    clusters = clusters_of(args.config)
    from quota_pipeline.journal.objstore import ObjectStoreError
    from quota_pipeline.journal.storage import JournalBusy

    try:
        if args.journal_action == "stats":
            return stats(clusters, args.json)
        return maintain(clusters, args.journal_action, args.dry_run)
    except (JournalBusy, ObjectStoreError) as exc:  # the store: unreachable, refused, or its bucket missing
        fail(str(exc), code=1)


def stats(clusters, as_json: bool) -> int:
    from rich.console import Console
    from rich.table import Table

    from quota_pipeline.journal.maintenance import usage_of

    rows = [(c, usage_of(c)) for c in clusters]
    if as_json:
        print(json.dumps([{"cluster": c.name, "path": c.location, **u.to_json()} for c, u in rows], indent=2))
        return 0
    table = Table(title="snapshot journal")
    for col in ("cluster", "bytes", "files", "periods compacted", "periods open", "oldest snapshot",
                "newest snapshot"):
        table.add_column(col, no_wrap=True, justify="right" if col in ("bytes", "files") else "left")
    for c, u in rows:
        j = u.to_json()
        table.add_row(shown(c.name), size(u.bytes), str(u.files), str(u.periods_compacted), str(u.periods_open),
                      j["oldest"] or "-", j["newest"] or "-")
    Console(width=max(120, Console().width)).print(table)
    for c, u in rows:
        for rel in u.unreadable:
            print(f"warning: {visible(c.location + '/' + rel)}: unreadable period file (replay reports it; move it away to "
                  f"compact its period again)", file=sys.stderr)
    return 0


def maintain(clusters, action: str, dry_run: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from quota_pipeline.core.clock import SYSTEM
    from quota_pipeline.journal.maintenance import Options, run_pass

    console = Console(stderr=True)
    for c in clusters:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console, transient=True, disable=not console.is_terminal) as progress:
            task = progress.add_task(markup(f"{c.name}: {action}"), total=None)
            options = Options(compact=action == "compact", prune=action == "prune", dry_run=dry_run,
                              wait_s=LOCK_WAIT_S,
                              on_plan=lambda plan, t=task: progress.update(
                                  t, total=sum(len(a.new) for a in plan.compact) or None),
                              progress=lambda n, t=task: progress.advance(t, n))
            report = run_pass(c, SYSTEM.now(), options)
        print("\n".join(visible(line) for line in describe(report, action, dry_run)), flush=True)
    return 0


def describe(report, action: str, dry_run: bool) -> list[str]:
    """What a pass did (or would do), one line per period, then where the journal stands."""
    name, plan, lines = report.cluster, report.plan, []
    if dry_run and plan is not None:
        lines += [f"{name}: would delete {p.period} past retention ({count(p.files, 'file')}, {size(p.bytes)})"
                  for p in plan.prune]
        lines += [f"{name}: would compact {a.period}: {count(len(a.new), 'tick file')} "
                  f"({size(sum(t.size for t in a.new))})" for a in plan.compact]
    lines += [f"{name}: deleted {p.period} past retention ({count(p.files, 'file')}, {size(p.bytes)})"
              for p in report.pruned]
    lines += [f"{name}: compacted {r.period}: {count(r.added, 'snapshot')}, {count(r.removed, 'tick file')} "
              f"removed, {size(r.bytes_before)} -> {size(r.bytes_after)}" for r in report.rewritten]
    lines += [f"{name}: warning: {p}" for p in report.problems]
    if plan is not None and not (plan.prune or plan.compact):
        why = "every closed period is compacted" if action == "compact" else "no period is past retention"
        lines.append(f"{name}: nothing to {action} ({why})")
    u = report.usage
    if u is not None:
        lines.append(f"{name}: journal {size(u.bytes)} in {count(u.files, 'file')}, "
                     f"{count(u.periods_compacted, 'period')} compacted, {u.periods_open} open")
    return lines


def size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
