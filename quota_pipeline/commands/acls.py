"""`quota-pipeline acls --config CONF [--apply] [--json]`: the least-privilege ACLs, printed or created."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from quota_pipeline.commands.common import add_config_argument, configure_logging, fail, load_or_exit
from quota_pipeline.core import config as cfg
from quota_pipeline.core.properties import ADMIN_PREFIX, OUTPUT_KAFKA_PREFIX
from quota_pipeline.kafka.acls import (
    BOTH, OBSERVED, OUTPUT, AclInputError, ClusterAcls, Principals, check_principal, kafka_acls_lines, plan, sasl_principal, to_json,
)

EXIT_FAILED = 1
_PRINCIPAL_HELP = "a Kafka principal, e.g. User:alice (SASL) or User:CN=host,O=org (TLS, after the brokers' " \
                  "ssl.principal.mapping.rules)"


WILDCARD = "User:*"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "acls", help="the least-privilege ACLs of the pipeline, its readers and enforce (kafka-acls.sh lines, "
                     "--json, or --apply)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print the ACL bindings that let the pipeline, and only the pipeline, write the decision "
                    "topic, as kafka-acls.sh lines (or --json), or create them with --apply.\n\n"
                    "  observed cluster (kafka.admin.*):  the pipeline DESCRIBE on the cluster (DescribeLogDirs);\n"
                    "                                     enforce ALTER_CONFIGS, DESCRIBE_CONFIGS on the cluster\n"
                    "  output cluster (quota.pipeline.output.kafka.*, else the same):\n"
                    "                                     the pipeline CREATE, WRITE, DESCRIBE on the topic and\n"
                    "                                     DESCRIBE_CONFIGS on the cluster (replica.lag.time.max.ms);\n"
                    "                                     readers and enforce READ, DESCRIBE on the topic\n\n"
                    "The pipeline's principals come from the SASL PLAIN/SCRAM user names in CONF unless given. "
                    "Creating ACLs needs a principal with ALTER and DESCRIBE on the cluster: --command-config "
                    "FILE gives its client settings (as kafka-acls.sh takes them); without it CONF's own settings "
                    "are used. Existing bindings are kept; any other principal allowed to write the topic is "
                    "reported. Exit code 1 when a cluster refuses or cannot be reached, 2 for bad input. "
                    "See docs/security.md.")
    add_config_argument(p, "the pipeline's .properties file")
    p.add_argument("--pipeline-principal", metavar="PRINCIPAL",
                   help=f"the pipeline's principal on the output cluster (default: the SASL user of "
                        f"{OUTPUT_KAFKA_PREFIX}*, else of {ADMIN_PREFIX}*); {_PRINCIPAL_HELP}")
    p.add_argument("--observer-principal", metavar="PRINCIPAL",
                   help="the pipeline's principal on the observed cluster when it differs (default: "
                        "--pipeline-principal, else the SASL user of kafka.admin.*)")
    p.add_argument("--reader-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="a principal that follows the decision topic: the brokers' callback (its "
                        "quota.pipeline.output.kafka.* login), dashboard, tail; repeatable; User:* lets anyone read")
    p.add_argument("--enforce-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="the principal `enforce` runs as: client quotas on the observed cluster, reads the topic; "
                        "repeatable")
    p.add_argument("--apply", action="store_true",
                   help="create the bindings through the Admin API (CreateAcls) on the cluster(s) they belong on")
    p.add_argument("--json", action="store_true", help="print JSON (the bindings, or with --apply what was added)")
    p.add_argument("--command-config", metavar="FILE",
                   help="Java client properties of an admin allowed to create ACLs on the observed cluster (and "
                        "on the output cluster when it is the same); its bootstrap.servers, if set, wins")
    p.add_argument("--output-command-config", metavar="FILE",
                   help="the same for the output cluster when it is another cluster")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long --apply waits for each cluster (default 30)")
    p.add_argument("-v", "--verbose", action="store_true", help="log the Kafka client's details")
    p.set_defaults(func=run)


def principals(args: argparse.Namespace, conf: cfg.Config) -> Principals:
    """Who gets which binding: flags first, else the SASL user names in CONF; bad input exits 2."""
    try:
        pipeline = args.pipeline_principal or sasl_principal(conf.output_settings)
        where = OUTPUT_KAFKA_PREFIX if conf.separate_output else ADMIN_PREFIX
        if pipeline is None:
            fail(f"cannot tell the pipeline's principal on the output cluster: {where}* has no SASL PLAIN or SCRAM "
                 "login; give --pipeline-principal PRINCIPAL (for a TLS certificate, the name the brokers' "
                 "ssl.principal.mapping.rules make of its subject)")
        observer = args.observer_principal or args.pipeline_principal or sasl_principal(conf.admin)
        if observer is None:
            fail(f"cannot tell the pipeline's principal on the observed cluster: {ADMIN_PREFIX}* has no SASL PLAIN "
                 "or SCRAM login; give --observer-principal PRINCIPAL")
        return Principals(
            pipeline=check_principal(pipeline, "--pipeline-principal" if args.pipeline_principal else
                                     f"the SASL user of {where}*"),
            observer=check_principal(observer, "--observer-principal" if args.observer_principal else
                                     "--pipeline-principal" if args.pipeline_principal else
                                     f"the SASL user of {ADMIN_PREFIX}*"),
            readers=tuple(check_principal(r, "--reader-principal", wildcard_ok=True) for r in args.reader_principal),
            enforce=tuple(check_principal(e, "--enforce-principal") for e in args.enforce_principal))
    except AclInputError as exc:
        fail(str(exc))


def _command_settings(path: str | None, flag: str) -> dict[str, str] | None:
    if path is None:
        return None
    try:
        return cfg.read_properties(path)
    except cfg.ConfigError:
        fail(f"{flag}: no such file {path}; give the admin's client .properties file (as kafka-acls.sh takes it)")
    except (OSError, ValueError) as exc:
        fail(f"{flag}: cannot read {path} ({exc}); give a Java .properties file")


@dataclass(frozen=True)
class Connection:
    """Where the bindings of one cluster go: its client settings (an admin file's win) and where they came from."""

    settings: Mapping[str, str]
    where: str  # the settings' prefix or file, for messages
    command_config: str | None


def connections(args: argparse.Namespace, conf: cfg.Config) -> dict[str, Connection]:
    """Per cluster role, the settings --apply uses and kafka-acls.sh points at."""
    def one(settings: Mapping[str, str], prefix: str, path: str | None, flag: str) -> Connection:
        admin = _command_settings(path, flag)
        if admin is None:
            return Connection(dict(settings), prefix, None)
        return Connection({**settings, **admin} if "bootstrap.servers" not in admin else admin, f"{path}: ", path)
    if not conf.separate_output:
        if args.output_command_config:
            fail("--output-command-config: the decision topic is on the observed cluster (no "
                 f"{OUTPUT_KAFKA_PREFIX}bootstrap.servers); use --command-config")
        return {BOTH: one(conf.admin, ADMIN_PREFIX, args.command_config, "--command-config")}
    return {OBSERVED: one(conf.admin, ADMIN_PREFIX, args.command_config, "--command-config"),
            OUTPUT: one(conf.output_kafka, OUTPUT_KAFKA_PREFIX, args.output_command_config,
                        "--output-command-config")}


def wildcard_reader_warning(readers: tuple[str, ...], conf: cfg.Config) -> str | None:
    """A warning when every principal may read records that name the cluster's log dirs and topics."""
    if WILDCARD not in readers:
        return None
    listed = (f"its {cfg.CLOSEST_VOLUMES}={conf.closest_volumes} log dirs closest to the limit with their largest "
              f"partitions (topic names), " if conf.closest_volumes else "")
    leave_out = (f"set {cfg.CLOSEST_VOLUMES}=0 to leave the partitions and those log dirs out of the record; "
                 if conf.closest_volumes else "")
    return (f"warning: --reader-principal {WILDCARD} lets every principal read the decision topic, whose records "
            f"name {listed}the worst log dir and, at a stop, the topics it refuses: {leave_out}the worst log dir "
            f"and the stop's topics stay (the brokers' authorizer needs the topics; with "
            f"{cfg.STOP_SCOPE}=cluster on the brokers every topic is stopped instead). Prefer the brokers' and "
            f"dashboards' own principals")


def run(args: argparse.Namespace) -> int:
    configure_logging(args.verbose)
    conf = load_or_exit(args.config)
    who = principals(args, conf)
    conns = connections(args, conf)
    clusters = plan(who, conf.output_topic, conns[BOTH if BOTH in conns else OBSERVED].settings,
                    conns[OUTPUT].settings if OUTPUT in conns else None)
    if not who.readers:
        print("note: no --reader-principal: nothing else may read the decision topic; give the principal of "
              "the brokers' callback (and of dashboards)", file=sys.stderr)
    warning = wildcard_reader_warning(who.readers, conf)
    if warning:
        print(warning, file=sys.stderr)
    if not args.apply:
        if args.json:
            print(json.dumps(to_json(clusters), indent=2))
        else:
            print("\n".join(kafka_acls_lines(clusters, {r: c.command_config for r, c in conns.items()})))
        return 0
    return _apply(args, clusters, conns, conf.output_topic, who)


def _apply(args: argparse.Namespace, clusters: list[ClusterAcls], conns: Mapping[str, Connection], topic: str,
           who: Principals) -> int:
    from quota_pipeline.kafka.acl_admin import AclAdmin, AclAdminError, describe
    report: list[dict[str, Any]] = []
    for cluster in clusters:
        conn = conns[cluster.role]
        try:
            applied = AclAdmin(conn.settings, conn.where, args.timeout).apply(cluster.bindings, topic, who.pipeline)
        except AclAdminError as exc:
            print(f"error: {cluster.role} cluster: {exc}", file=sys.stderr)
            return EXIT_FAILED
        report.append({"cluster": cluster.role, "bootstrap_servers": cluster.bootstrap,
                       "added": [b.to_json() for b in applied.added],
                       "already_present": [b.to_json() for b in applied.present],
                       "other_writers": list(applied.other_writers)})
        for other in applied.other_writers:
            print(f"warning: on the {cluster.role} cluster another ACL lets someone write {topic}: {other}; only "
                  f"the pipeline ({who.pipeline}) should (remove it with kafka-acls.sh --remove)", file=sys.stderr)
        if not args.json:
            print(f"{cluster.role} cluster ({cluster.bootstrap}): {len(applied.added)} added, "
                  f"{len(applied.present)} already present")
            for b in applied.added:
                print(f"  added {describe(b)}")
    if args.json:
        print(json.dumps({"clusters": report}, indent=2))
    return 0
