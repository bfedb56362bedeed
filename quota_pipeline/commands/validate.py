"""`quota-pipeline validate CONFIG`: print the effective configuration or every problem in it."""
from __future__ import annotations

import argparse
import sys

from quota_pipeline.core import config as cfg

EXIT_CONFIG = 2


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


def load_or_exit(path: str, require_admin: bool = True) -> cfg.Config:
    """Load a config for a command; on problems print them all and exit 2 before anything starts."""
    try:
        conf = cfg.load(path, require_admin=require_admin)
    except cfg.ConfigError as exc:
        for w in exc.warnings:
            print(w, file=sys.stderr)
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)
    for w in conf.warnings:
        print(w, file=sys.stderr)
    return conf


def run(args: argparse.Namespace) -> int:
    conf = load_or_exit(args.config)
    for key, value in conf.effective().items():
        print(f"{key}={value}")
    return 0
