"""`quota-pipeline enforce CONFIG`: apply the published factor to stock Kafka (DENY WRITE ACLs, client quotas)."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from quota_pipeline.core.display import visible
from quota_pipeline.core.names import UnsafePath
from quota_pipeline.enforce.baseline import (
    ABSOLUTE_STATE_ENV, BaselineError, baseline_file, check_durable, state_checkpoint,
)
from quota_pipeline.commands.common import (
    EXIT_CONFIG, add_bootstrap_override, add_config_argument, configure_logging, fail, load_with_override,
)
from quota_pipeline.core.config import CHECKPOINT_PATH, Config
from quota_pipeline.enforce import admits
from quota_pipeline.enforce.plan import Policy, throttle_floor
from quota_pipeline.enforce.enforcer import DEFAULT_INTERVAL_SECONDS, DEFAULT_SETTLE_SECONDS, Enforcer, StepResult
from quota_pipeline.enforce.refuse import STOP_MODES, STOP_REFUSE, RefusalPolicy
from quota_pipeline.enforce.refuser import RefusalFile, Refuser
from quota_pipeline.kafka.acl_admin import AclAdmin, AclAdminError, AuthorizerMissing
from quota_pipeline.kafka.quota_admin import QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.refusal import ADMIN_SETTINGS, ClusterRefused
from quota_pipeline.reader.reader import Reader

EXIT_FAILED = 1
STOP_PROPERTY = "quota.pipeline.enforce.stop"
ALLOW_EVERYONE = "allow.everyone.if.no.acl.found"  # the brokers' setting, read from CONFIG as quota.window.num is
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
NO_AUTHORIZER = (f"the cluster has no authorizer, so --stop refuse cannot refuse writes: set "
                 f"authorizer.class.name={STANDARD_AUTHORIZER} with {ALLOW_EVERYONE}=true on every node (and "
                 f"{ALLOW_EVERYONE}=true in CONFIG), or run enforce with --stop throttle")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "enforce",
        help="apply the published factor to a stock Kafka cluster: the stop refuses writes (DENY WRITE ACLs), "
             "the throttle scales client quotas (KIP-546)",
        description="Follow the decision topic (quota.pipeline.output.topic on the quota.pipeline.output.kafka.* "
                    "cluster, else the admin cluster) for one cluster. At factor 0 (--stop refuse, the default) "
                    "refuse every write to the stop's topics with DENY WRITE ACL bindings for User:* and delete "
                    "exactly those at the release; between 0 and 1 scale the producer_byte_rate of every "
                    "client-quota entity so that each non-excluded client's produce quota becomes baseline x "
                    "factor; restore the operator's quotas exactly at factor 1.0. The reader's validity check and "
                    "fallback apply. Semantics: docs/enforce.md. Exit code 1 when the cluster or the baseline file "
                    "fails in --once mode, 2 for an invalid configuration or a cluster without an authorizer in "
                    "--stop refuse mode.",
    )
    add_config_argument(p, "the Strimzi-compatible .properties file")
    add_bootstrap_override(p, "the cluster to enforce on")
    p.add_argument("--cluster", metavar="NAME",
                   help="the decision key to follow (default: quota.pipeline.cluster.name, else the cluster id)")
    p.add_argument("--baseline", metavar="PATH",
                   help="the baseline file; the refusal state file goes beside it (default: "
                        "<quota.pipeline.checkpoint.path>/enforce/<cluster>.json, /var/lib/quota-pipeline/enforce/ "
                        "when CONFIG does not set the path; it must survive a restart)")
    p.add_argument("--stop", choices=STOP_MODES, default=None,
                   help="what factor 0 does (default: quota.pipeline.enforce.stop, else refuse). refuse: DENY WRITE "
                        "bindings for User:* on each topic of the stop (the record's topics, or every topic with "
                        "quota.pipeline.stop.scope=cluster, the fallback or a record without a topic list); "
                        "producers get TOPIC_AUTHORIZATION_FAILED at once and are back as soon as the bindings go; "
                        "no client quota is lowered; needs an authorizer (StandardAuthorizer); only super.users "
                        "escape. throttle: no write refused; client quotas at the quota throttle's floor (clients "
                        "get a request through per mute and wait out up to quota.pipeline.throttle.max.mute after the release)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the changes the current factor calls for (and the bindings a stop would write); "
                        "change nothing, write no baseline")
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
    for change in result.refusals:
        print(f"factor {result.factor:g}: {change}")
    if result.refusals and not result.changes and not result.operator_edits:
        sys.stdout.flush()
        return
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
    mode = stop_mode(args, conf)
    checkpoint = state_checkpoint(conf.checkpoint_path, CHECKPOINT_PATH in conf.raw)
    try:
        check_durable(args.baseline, checkpoint, bool(os.environ.get(ABSOLUTE_STATE_ENV)), create=not args.dry_run)
    except BaselineError as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return EXIT_CONFIG
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
                store = baseline_file(args.baseline, checkpoint, cluster, conf.signing_keys)
            except UnsafePath as exc:
                fail(str(exc))
            refusal_store = RefusalFile.beside(store)
            acl_admin = acl_admin_for(conf, mode, refusal_store)
            with Reader(conf, cluster=cluster) as reader:
                wake = threading.Event()
                reader.on_change(lambda *_: wake.set())
                if not reader.wait_caught_up(args.catch_up_timeout):
                    if reader.refusal():
                        raise ClusterRefused(reader.refusal())  # said below, once the reader has stopped
                    logging.warning("the reader has not caught up with %s within %.0f s; going on with its current "
                                    "answer (%s)", conf.output_topic, args.catch_up_timeout, reader.answer().reason)
                refuser = stop_refuser(conf, mode, cluster, acl_admin, refusal_store, args.dry_run)
                policy = Policy.of(conf.excluded_principals, conf.produce, throttle_floor(conf.stop_limit()))
                enforcer = Enforcer(cluster, reader, admin, store, policy,
                                    dry_run=args.dry_run, settle_seconds=args.settle, refuser=refuser)
                refusals = RefusalNote(reader)
                if args.once:
                    report(enforcer.step(), args.dry_run)
                    refusals()
                    return 0
                say_what_it_does(conf, mode, cluster, enforcer, store.path, refusal_store.path)
                enforcer.run(stop, wake, args.interval, report=lambda r: (report(r, args.dry_run), refusals()))
                return 0
    except AuthorizerMissing:
        print(f"error: {NO_AUTHORIZER}", file=sys.stderr)
        return EXIT_CONFIG
    except (QuotaAdminError, AclAdminError, BaselineError, ClusterRefused) as exc:
        print(f"error: {visible(exc)}", file=sys.stderr)
        return EXIT_FAILED


def acl_admin_for(conf: Config, mode: str, refusal_store: RefusalFile) -> AclAdmin | None:
    """The ACL client the refusing stop needs (also to release what a refusing run left), None without one; raises
    AuthorizerMissing when the cluster has no authorizer to refuse with."""
    held = refusal_store.load()  # before the reader: a file the enforcer cannot trust ends the command at once
    if mode != STOP_REFUSE and held is None:
        return None
    acl_admin = AclAdmin(conf.admin, ADMIN_SETTINGS)
    if mode == STOP_REFUSE:
        if not acl_admin.authorizer():
            raise AuthorizerMissing(NO_AUTHORIZER)
        for line in refusal_warnings(conf):
            logging.warning(line)
    return acl_admin


def say_what_it_does(conf: Config, mode: str, cluster: str, enforcer: Enforcer, baseline: Path,
                     refusals: Path) -> None:
    """The start lines: what is followed, where the state lives, and what a stop means in this mode."""
    print(visible(f"enforcing decisions for {cluster} from {conf.output_topic}; baseline file {baseline}"))
    if mode == STOP_REFUSE:
        print(visible(f"at factor 0 writes are refused (--stop refuse): DENY WRITE for User:* on each topic of the "
                      f"stop; refusal state file {refusals}"))
    else:
        for line in admits.describe(conf.stop_limit(), enforcer.policy.produce_floor, conf.produce):
            print(line)  # what quota.pipeline.throttle.max.mute means here
    for warning in admits.warnings(conf.produce):
        logging.warning(warning)
    sys.stdout.flush()


def stop_mode(args: argparse.Namespace, conf: Config) -> str:
    """--stop, else quota.pipeline.enforce.stop, else refuse."""
    return args.stop or (conf.raw.get(STOP_PROPERTY) or "").strip() or STOP_REFUSE


def allow_everyone(conf: Config) -> bool:
    """The brokers' allow.everyone.if.no.acl.found as CONFIG repeats it (DescribeConfigs does not show its value);
    unset: Kafka's default, false, which never grants anything."""
    return (conf.raw.get(ALLOW_EVERYONE) or "").strip().lower() == "true"


def refusal_warnings(conf: Config) -> list[str]:
    """Said once at start in --stop refuse mode."""
    out = []
    if conf.excluded_principals:
        out.append(f"{', '.join(conf.excluded_principals)} (excluded.principal.name.list) are refused at a stop like "
                   "everyone else: a DENY for User:* beats every ALLOW; only the brokers' super.users escape it, so "
                   "list there the principals that must write during a stop")
    if ALLOW_EVERYONE not in conf.raw:
        out.append(f"{ALLOW_EVERYONE} is not set in CONFIG: taken as false (Kafka's default). If the brokers set it "
                   "to true, set it here too: otherwise a stopped topic without ACLs of its own becomes unreadable to "
                   "every principal but super.users while the stop lasts")
    return out


def stop_refuser(conf: Config, mode: str, cluster: str, acl_admin: AclAdmin | None, store: RefusalFile,
                 dry_run: bool) -> Refuser | None:
    """The refusing stop's part of the enforcer; in throttle mode only to release what a refusing run left."""
    if acl_admin is None:
        return None
    return Refuser(cluster, acl_admin, store, RefusalPolicy.of(conf), mode=mode, allow_everyone=allow_everyone(conf),
                   dry_run=dry_run)
