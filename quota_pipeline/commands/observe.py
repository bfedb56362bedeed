"""`quota-pipeline observe CONFIG`: poll the cluster once and print the snapshot as journal JSON."""
from __future__ import annotations

import argparse
import json
import sys

from quota_pipeline.commands.common import (
    add_bootstrap_override, add_config_argument, configure_logging, load_with_override,
)
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
                    "either way, and one `error:` line on stderr says why), 2 for an invalid configuration.",
    )
    add_config_argument(p, "the .properties file; optional with --bootstrap-server", required=False)
    add_bootstrap_override(p, "observe this cluster; no CONFIG needed then")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log the Kafka client's connection details")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.verbose)
    conf = load_with_override(args.config, args.bootstrap_server, "give a CONFIG file or --bootstrap-server HOST:PORT")
    with Observer(conf) as observer:
        snapshot = observer.poll()
    print(json.dumps(snapshot.to_json(), indent=2 if args.pretty else None))
    if snapshot.status is Status.SUCCESS:
        return 0
    # The record is for machines; a person running the command reads why on stderr, in one line.
    print(f"error: {snapshot.status.value}: {snapshot.message or 'no detail'}", file=sys.stderr)
    return EXIT_NOT_SUCCESS
