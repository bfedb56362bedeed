"""What spark-submit.sh adds to --packages for `run ARGS...`: Hadoop's S3A connector when the job checkpoints on s3a://.

`python -m quota_pipeline.commands.submit_packages ARGS...` prints the coordinate, or nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys

from quota_pipeline.commands import run
from quota_pipeline.commands.common import resolve_config
from quota_pipeline.core import config as cfg
from quota_pipeline.streaming.s3a import connector_package, is_s3a


def _run_arguments(argv: list[str]) -> argparse.Namespace:
    """`argv` parsed as `quota-pipeline run` parses it."""
    parser = argparse.ArgumentParser(prog="quota-pipeline")
    run.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", *argv])
    resolve_config(args)
    return args


def submit_package(argv: list[str]) -> str | None:
    """The coordinate to add to spark-submit's --packages for `run argv...`, or None (no s3a:// checkpoint, or
    arguments the job itself will reject and explain)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # `--help` is the job's to print, not this coordinate's
            first = cfg.load(run.config_paths(_run_arguments(argv))[0])
    except (SystemExit, Exception):  # noqa: BLE001 - the job reports its own usage and config errors
        return None
    return connector_package() if is_s3a(first.checkpoint_path) else None


if __name__ == "__main__":
    package = submit_package(sys.argv[1:])
    if package:
        print(package)
