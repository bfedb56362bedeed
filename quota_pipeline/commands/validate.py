"""`quota-pipeline validate CONFIG`: print the effective configuration or every problem in it."""
from __future__ import annotations

import argparse
from quota_pipeline.commands.common import load_or_exit

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a .properties file and print the effective configuration",
        description="Validate a Strimzi-compatible .properties file. Prints every effective property "
                    "(defaults filled in, secrets masked) or one 'error: <property>: ...' line per problem "
                    "and exits with code 2.",
    )
    p.add_argument("config", metavar="CONFIG", help="path of the .properties file (the broker config works)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    conf = load_or_exit(args.config)
    for key, value in conf.effective().items():
        print(f"{key}={value}")
    return 0
