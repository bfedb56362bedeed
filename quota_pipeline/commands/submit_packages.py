"""What spark-submit.sh adds to --packages for `run ARGS...`: Hadoop's S3A connector when the job checkpoints on s3a://.

`python -m quota_pipeline.commands.submit_packages ARGS...` prints the coordinate, or nothing.
"""
from __future__ import annotations

import contextlib
import io
import sys

from quota_pipeline.cli import build_parser
from quota_pipeline.commands.run import config_paths
from quota_pipeline.core import config as cfg
from quota_pipeline.streaming.s3a import connector_package, is_s3a


def submit_package(argv: list[str]) -> str | None:
    """The coordinate to add to spark-submit's --packages for `run argv...`, or None (no s3a:// checkpoint, or
    arguments the job itself will reject and explain)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # `--help` is the job's to print, not this coordinate's
            first = cfg.load(config_paths(build_parser().parse_args(["run", *argv]))[0])
    except (SystemExit, Exception):  # noqa: BLE001 - the job reports its own usage and config errors
        return None
    return connector_package() if is_s3a(first.checkpoint_path) else None


if __name__ == "__main__":
    package = submit_package(sys.argv[1:])
    if package:
        print(package)
