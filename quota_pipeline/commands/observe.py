"""`quota-pipeline observe CONFIG`: poll the cluster once and print the snapshot as journal JSON."""
from __future__ import annotations

import argparse
import json
import logging
import sys

from quota_pipeline.core import config as cfg
from quota_pipeline.commands.validate import load_or_exit
from quota_pipeline.core.model import Status
from quota_pipeline.kafka.observer import Observer

EXIT_NOT_SUCCESS = 3


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "observe",
        help="poll the cluster once (DescribeCluster + DescribeLogDirs) and print the snapshot as JSON",
        description="Observe the cluster named by kafka.admin.bootstrap.servers once and print one snapshot "
                    "journal record (DESIGN.md) with every volume's total, available and used bytes and ratio. "
                    "Exit code 0 when the status is SUCCESS, 3 for any other status (the record is printed "
                    "either way), 2 for an invalid configuration.",
    )
    p.add_argument("config", metavar="CONFIG", nargs="?",
                   help="the .properties file; optional with --bootstrap-server")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="observe this cluster (overrides kafka.admin.bootstrap.servers; no CONFIG needed)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log the Kafka client's connection details")
    p.set_defaults(func=run)


def load(args: argparse.Namespace) -> cfg.Config:
    if args.config is None and not args.bootstrap_server:
        print("error: give a CONFIG file or --bootstrap-server HOST:PORT", file=sys.stderr)
        raise SystemExit(2)
    if args.config is None:
        # The observer needs no limits; a placeholder satisfies the config contract.
        return cfg.parse({cfg.BOOTSTRAP: args.bootstrap_server, cfg.HARD_BYTES: "0"}, "--bootstrap-server")
    conf = load_or_exit(args.config, require_admin=not args.bootstrap_server)
    if args.bootstrap_server:
        props = {**conf.raw, cfg.BOOTSTRAP: args.bootstrap_server}
        conf = cfg.parse(props, conf.path)
    return conf


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # its connection errors become the snapshot status
    conf = load(args)
    with Observer(conf) as observer:
        snapshot = observer.observe()
    print(json.dumps(snapshot.to_json(), indent=2 if args.pretty else None))
    return 0 if snapshot.status is Status.SUCCESS else EXIT_NOT_SUCCESS
