"""The `quota-pipeline` entry point: one sub-command per module under quota_pipeline/commands."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# Each module exposes register(subparsers) and sets a `func(args) -> int` default.
COMMANDS = (
    "validate",
    "simulate",
    "observe",
    "replay",
    "journal",
    "quotas",
    "acls",
    "enforce",
    "run",
    "prepare",
    "demo",
    "dashboard",
    "tail",
    "remedy",
)


def _version() -> str:
    """The installed distribution's version (a source tree that is not installed says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quota-pipeline")
    except PackageNotFoundError:
        return "(not installed)"


class _Parser(argparse.ArgumentParser):
    """Every parse (the command line, and callers that build the parser themselves) ends with the configuration
    file on `args.config`, however it was given (commands.common.add_config_argument)."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        from quota_pipeline.commands.common import resolve_config

        parsed, extras = super().parse_known_args(args, namespace)
        resolve_config(parsed)
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="quota-pipeline",
        description="Cluster-wide disk-pressure protection for Apache Kafka, decided once by a Spark job and "
                    "published to a compacted topic that every broker reads. Factor 1: open. 0 < factor < 1: "
                    "the throttle (production slowed to the factor, by the quota callback or enforce's client "
                    "quotas). Factor 0: the stop (writes refused, by StopAuthorizer or enforce's DENY WRITE ACLs).",
    )
    parser.add_argument("--version", action="version", version=f"quota-pipeline {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"quota_pipeline.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def submitted(command: str, argv: list[str]) -> int:
    """`command argv...` as spark-submit.sh runs it (jobs/): from the directory it was started in, which
    QUOTA_PIPELINE_CWD names when Spark's JVM runs elsewhere, so the paths given keep their meaning."""
    start = os.environ.pop("QUOTA_PIPELINE_CWD", None)
    if start:
        os.chdir(start)
    return main([command, *argv])


if __name__ == "__main__":
    sys.exit(main())
