"""`quota-pipeline remedy CONFIG`: the plan that brings full log dirs back above their limit; `--execute` runs it."""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import signal
import sys
import threading
from typing import Iterator

from quota_pipeline.commands.common import (
    add_bootstrap_override, add_config_argument, configure_logging, fail, load_with_override,
)
from quota_pipeline.core.display import visible
from quota_pipeline.core.names import UnsafePath
from quota_pipeline.enforce.baseline import BaselineError
from quota_pipeline.kafka.remedy_admin import RemedyAdmin, RemedyAdminError
from quota_pipeline.remedy import planner
from quota_pipeline.remedy.executor import Executor, outcome
from quota_pipeline.remedy.gather import read_view
from quota_pipeline.remedy.need import Margin, parse_size
from quota_pipeline.remedy.plan import MovePlan
from quota_pipeline.remedy.progress import finished, state_of
from quota_pipeline.remedy.render import as_json, print_plan
from quota_pipeline.remedy.state import RemedyFile, RemedyState, remedy_file

EXIT_FAILED, EXIT_UNRESOLVED, EXIT_INTERRUPTED = 1, 3, 130
INTERRUPTED = ("interrupted: the moves already started go on in the cluster and its throttles stay until they are "
               "done; run `quota-pipeline remedy --execute` again to follow them and take the throttles back, or "
               "`--abort` to cancel them")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "remedy", help="plan (and with --execute make) the partition moves that bring full log dirs back above "
                       "their limit",
        description="For every log dir at or past its soft limit (the hard limit without one), or reaching the hard "
                    "limit within storage.per.volume.eta.horizon, plan the moves of the fewest bytes that bring it "
                    "back above that limit with --margin: to another dir of the same broker (AlterReplicaLogDirs), "
                    "else to another broker (AlterPartitionReassignments, replication throttled at --throttle). A "
                    "target never goes past its own limit (its growth during the moves counted); replicas stay on "
                    "distinct brokers and racks; partitions already moving and the decision topic stay. Nothing "
                    "changes without --execute, which applies the plan, shows progress, and takes back the "
                    "throttles it set (and only those); interrupted, run it again to resume. Data is never deleted "
                    "and retention never lowered: the plan only suggests it. A state file is acted on only for what "
                    "a plan can hold (one replica moved per partition, its replication factor kept, onto active "
                    "brokers and their log dirs; remedy's own throttles and cordons): anything else is refused and "
                    "nothing is sent. Exit code 0, 3 when some dir cannot be "
                    "brought back, 1 when the cluster fails, 2 for bad input, 130 when interrupted. "
                    "Semantics: docs/design.md, \"Remedy\".")
    add_config_argument(p, "the .properties file of the observed cluster (its limits)")
    add_bootstrap_override(p, "the cluster to remedy")
    p.add_argument("--margin", default="2%", metavar="SIZE",
                   help="how far above its limit a dir is brought: bytes (1048576, 64MiB, 1GB) or a share of the "
                        "dir's size (5%%); default 2%%")
    p.add_argument("--throttle", default="10MiB", metavar="BYTES_PER_S",
                   help="replication throttle per broker while partitions move, also the pace the plan counts on "
                        "(64MiB, 100MB); default 10MiB")
    p.add_argument("--sample", type=float, default=10.0, metavar="SECONDS",
                   help="read the log dirs twice this far apart to know how fast each dir and partition grows "
                        "(0: no growth counted); default 10")
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of tables")
    p.add_argument("--execute", action="store_true",
                   help="apply the plan and follow it until its moves are done; resumes a plan an earlier run left")
    p.add_argument("--abort", action="store_true",
                   help="cancel the moves of a plan an earlier --execute left running and take back its throttles")
    p.add_argument("--state", metavar="PATH",
                   help="remedy's state file (default: <quota.pipeline.checkpoint.path>/remedy/<cluster>.json)")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="progress check interval")
    p.add_argument("-v", "--verbose", action="store_true", help="log the Kafka client's details")
    p.set_defaults(func=run)


def options(args: argparse.Namespace) -> tuple[Margin, float]:
    """The margin and the throttle rate, or one error line (exit 2)."""
    if args.execute and args.abort:
        fail("give --execute or --abort, not both")
    if args.sample < 0 or args.interval <= 0:
        fail("--sample must be 0 or more and --interval more than 0 seconds")
    try:
        margin = parse_size(args.margin, percent=True)
        rate = parse_size(args.throttle)
    except ValueError as exc:
        fail(f"--margin/--throttle: {exc}")
    if rate.value < 1:
        fail("--throttle must be 1 byte/s or more")
    return margin, rate.value


def run(args: argparse.Namespace) -> int:
    configure_logging(args.verbose)
    margin, rate = options(args)
    conf = load_with_override(args.config, args.bootstrap_server, "give CONFIG or --bootstrap-server HOST:PORT")
    say = (lambda line: print(visible(line), file=sys.stderr, flush=True)) if args.json else \
        (lambda line: print(visible(line), flush=True))
    try:
        with RemedyAdmin(conf.admin) as admin:
            cluster_id, _ = admin.cluster()
            store = remedy_file(args.state, conf.checkpoint_path, conf.cluster_name or cluster_id,
                                conf.signing_keys)
            executor = Executor(admin, conf, store, say=say, interval=args.interval)
            state = store.load()
            if args.abort or state is not None:
                return running_plan(args, executor, store, state)
            plan = planner.plan(read_view(admin, conf, args.sample), conf.limits, margin, rate,
                                conf.eta_horizon.total_seconds())
            show(plan, args.json)
            if args.execute and plan.moves:
                return execute(executor, executor.begin(plan))
            return 0 if all(d.resolved for d in plan.dirs) else EXIT_UNRESOLVED
    except (RemedyAdminError, BaselineError) as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except UnsafePath as exc:
        fail(str(exc))


@contextlib.contextmanager
def stopped_by_ctrl_c(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `stop`, which the executor checks between its steps. A KeyboardInterrupt raised wherever the main
    thread is would be lost when it lands inside kafka-python's event loop (it logs and drops what its tasks raise),
    and the run would go on to its end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def show(plan: MovePlan, as_json_text: bool) -> None:
    if as_json_text:
        print(as_json(plan), flush=True)
    else:
        print_plan(plan)


def running_plan(args: argparse.Namespace, executor: Executor, store: RemedyFile, state: RemedyState | None) -> int:
    """A plan an earlier --execute left: --abort cancels it, --execute resumes it, else it is shown."""
    if state is None:
        print(f"no plan is running (no state file {visible(store.path)})")
        return 0
    started = dt.datetime.fromtimestamp(state.started_at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.abort:
        executor.abort(state)
        print("aborted; its throttles are taken back")
        return 0
    if args.execute:
        return execute(executor, state, f"resuming the plan started {started} ({visible(store.path)})")
    view = executor.view()
    executor.vetted(state, view)  # shown as a plan only if it is one remedy could run
    show(state.plan, args.json)
    executor.say(f"this plan was started {started} and is not finished: "
                 + executor.progress_line({m: state_of(m, view) for m in state.plan.moves}, view)
                 + "; --execute follows it and takes its throttles back, --abort cancels it")
    return 0


def execute(executor: Executor, state: RemedyState, note: str = "") -> int:
    with stopped_by_ctrl_c(executor.stop):
        states = executor.execute(state, note)
    if not finished(states):
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    executor.say(f"done: {outcome(states)}; the throttles it set are taken back")
    return 0
