"""`quota-pipeline enforce CONFIG`: apply the published throttle factor to a stock Kafka cluster via client quotas."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from quota_pipeline.core.display import visible
from quota_pipeline.core.names import UnsafePath
from quota_pipeline.enforce.baseline import BaselineError, baseline_file
from quota_pipeline.commands.common import add_bootstrap_override, configure_logging, fail, load_with_override
from quota_pipeline.enforce import admits
from quota_pipeline.enforce.plan import Policy, stop_floor
from quota_pipeline.enforce.enforcer import DEFAULT_INTERVAL_SECONDS, DEFAULT_SETTLE_SECONDS, Enforcer, StepResult
from quota_pipeline.kafka.quota_admin import QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.refusal import ClusterRefused
from quota_pipeline.broker.reader import Reader

EXIT_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "enforce",
        help="apply the published throttle factor to a stock Kafka cluster through client quotas (KIP-546)",
        description="Follow the decision topic (quota.pipeline.output.topic on the quota.pipeline.output.kafka.* "
                    "cluster, else the admin cluster) for one cluster and, when its factor changes, scale the "
                    "producer_byte_rate of every client-quota entity so that each non-excluded client's produce "
                    "quota becomes max(1, baseline x factor); restore the operator's quotas exactly at factor 1.0. "
                    "The reader's validity check and fallback apply. Semantics: docs/enforce.md. Exit code 1 "
                    "when the cluster or the baseline file fails in --once mode, 2 for an invalid configuration.",
    )
    p.add_argument("config", metavar="CONFIG", help="the Strimzi-compatible .properties file")
    add_bootstrap_override(p, "the cluster to enforce on")
    p.add_argument("--cluster", metavar="NAME",
                   help="the decision key to follow (default: quota.pipeline.cluster.name, else the cluster id)")
    p.add_argument("--baseline", metavar="PATH",
                   help="the baseline file (default: <quota.pipeline.checkpoint.path>/enforce/<cluster>.json)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the changes the current factor calls for; change nothing, write no baseline")
    p.add_argument("--once", action="store_true", help="one reconcile after catching up with the topic, then exit")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_SECONDS, metavar="SECONDS",
                   help=f"reconcile at least this often, to see operator edits (default {DEFAULT_INTERVAL_SECONDS:g})")
    p.add_argument("--settle", type=float, default=DEFAULT_SETTLE_SECONDS, metavar="SECONDS",
                   help="how long Describe may lag behind an Alter before a difference counts as an operator "
                        f"edit (default {DEFAULT_SETTLE_SECONDS:g})")
    p.add_argument("--catch-up-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="wait this long for the reader to read the topic before the first reconcile (default 30)")
    p.add_argument("-v", "--verbose", action="store_true", help="log the Kafka clients' details")
    p.set_defaults(func=run)


def report(result: StepResult, dry_run: bool) -> None:
    if result.action == "idle" and not result.operator_edits:
        return
    for edit in result.operator_edits:
        print(f"operator edit adopted into the baseline: {visible(edit)}")
    if dry_run:
        print(f"factor {result.factor:g}: {len(result.changes)} planned change(s)" + (" (dry run)" if result.changes else ""))
    elif result.changes or result.action != "idle":
        print(f"factor {result.factor:g}: {result.action}" + (f", {len(result.changes)} change(s)" if result.changes else ""))
    for change in result.changes:
        print(f"  {visible(change)}")
    sys.stdout.flush()


class RefusalNote:
    """Logs the reader's count of refused decision records (dated ahead of the clock) whenever it grew, with the
    last one: only the pipeline may change the factor, and someone else wrote to its topic."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.seen = 0

    def __call__(self) -> None:
        stats = self.reader.stats
        if stats.refused != self.seen and stats.last_refusal is not None:
            self.seen = stats.refused
            logging.warning("%d decision record(s) refused so far: dated further ahead of this clock than "
                            "quota.pipeline.reader.max.clock.skew allows; the decision in force is kept (last: %s)",
                            stats.refused, stats.last_refusal.describe())


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    """The command; `stop` ends the loop (SIGINT/SIGTERM set it too, in the main thread)."""
    configure_logging(args.verbose, logging.INFO, timestamps=True)
    conf = load_with_override(args.config, args.bootstrap_server, "give CONFIG")
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    try:
        with QuotaAdmin(conf.admin) as admin:
            found = admin.cluster_id()  # connects first: a refused login or certificate ends the command here
            cluster = args.cluster or conf.cluster_name or found
            if not cluster:
                print("error: cannot tell which decisions to follow: set quota.pipeline.cluster.name or --cluster",
                      file=sys.stderr)
                return EXIT_FAILED
            try:
                store = baseline_file(args.baseline, conf.checkpoint_path, cluster)
            except UnsafePath as exc:
                fail(str(exc))
            with Reader(conf, cluster=cluster) as reader:
                wake = threading.Event()
                reader.on_change(lambda *_: wake.set())
                if not reader.wait_caught_up(args.catch_up_timeout):
                    if reader.refusal():
                        raise ClusterRefused(reader.refusal())  # said below, once the reader has stopped
                    logging.warning("the reader has not caught up with %s within %.0f s; going on with its current "
                                    "answer (%s)", conf.output_topic, args.catch_up_timeout, reader.answer().reason)
                enforcer = Enforcer(cluster, reader, admin, store,
                                    Policy.of(conf.excluded_principals, conf.produce, conf.excluded_client_ids,
                                              stop_floor(conf.stop_limit())),
                                    dry_run=args.dry_run, settle_seconds=args.settle)
                refusals = RefusalNote(reader)
                if args.once:
                    report(enforcer.step(), args.dry_run)
                    refusals()
                    return 0
                print(visible(f"enforcing decisions for {cluster} from {conf.output_topic}; baseline file {store.path}"))
                for line in admits.describe(conf.stop_limit(), enforcer.policy.produce_floor, conf.produce):
                    print(line)  # what quota.pipeline.throttle.max.mute means here
                for warning in admits.warnings(conf.produce):
                    logging.warning(warning)
                sys.stdout.flush()
                enforcer.run(stop, wake, args.interval, report=lambda r: (report(r, args.dry_run), refusals()))
                return 0
    except (QuotaAdminError, BaselineError, ClusterRefused) as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return EXIT_FAILED
