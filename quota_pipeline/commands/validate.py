"""`quota-pipeline validate CONFIG`: print the effective configuration or every problem in it."""
from __future__ import annotations

import argparse
import sys

from quota_pipeline.core import config as cfg
from quota_pipeline.core.stop import STOP_AUTHORIZERS, describe as describe_stop
from quota_pipeline.commands.common import add_config_argument, load_or_exit
from quota_pipeline.core.display import visible

CHECK_TIMEOUT_S = 3.0  # validate is interactive: an unreachable output cluster costs this, then a note
STOP_DOCS = "docs/broker-side.md"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a .properties file and print the effective configuration",
        description="Validate a Strimzi-compatible .properties file. Prints every effective property "
                    "(defaults filled in, secrets masked) or one 'error: <property>: ...' line per problem "
                    "and exits with code 2. When the output cluster answers within 3 s, also reads its brokers' "
                    "replica.lag.time.max.ms and warns (stderr, exit code 0) when the validity does not cover the "
                    "check interval plus the longest acks=all stall; unreachable, it says it could not check. "
                    f"One comment line says what a stop does with this configuration (the whole story: {STOP_DOCS}); "
                    "with the refusing stop (authorizer.class.name=StopAuthorizer) it warns when no principal is "
                    f"exempt ({cfg.EXCLUDED} empty). When the checkpoint path holds the start a job kept there "
                    "(start.json: process start to first published decision), it warns when the validity does not "
                    "cover twice it.",
    )
    add_config_argument(p, "path of the .properties file (the broker config works)")
    p.add_argument("--offline", action="store_true",
                   help="do not contact the output cluster (skips the validity check against its stalls) nor an "
                        "object store holding the checkpoint")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    conf = load_or_exit(args.config)
    for key, value in conf.effective().items():
        print(visible(f"{key}={value}"))  # the file's own text: a control character is shown escaped
    # What a stop admits: a refusal when the brokers' authorizer is StopAuthorizer, else the quota's throttle.
    refusal = conf.raw.get("authorizer.class.name", "").strip() in STOP_AUTHORIZERS
    print(f"{describe_stop(conf.stop_limit(), conf.produce, refusal=refusal, scope=conf.stop_scope)[0]} "
          f"(more: {STOP_DOCS})")
    if refusal and not conf.excluded_principals:
        print(f"warning: {cfg.EXCLUDED} is empty: no principal is exempt from the stop; list the pipeline's own "
              f"there (its decisions otherwise share the producers' throttle), and remedy's and your operators' (at "
              f"factor 0 their writes are refused) ({STOP_DOCS})", file=sys.stderr)
    from quota_pipeline.streaming import checkpoint_files, start_time

    if checkpoint_files.is_local(conf.checkpoint_path) or not args.offline:  # --offline: no object store either
        kept, refused = start_time.read(conf.checkpoint_path)
        for line in ([refused] if refused else []) + start_time.warnings([conf], kept, conf.checkpoint_path):
            print(f"warning: {line}", file=sys.stderr)
    if not args.offline:
        from quota_pipeline.kafka.publisher import stall_warning

        warning, unchecked = stall_warning([conf], CHECK_TIMEOUT_S)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        elif unchecked:
            print(f"note: {unchecked}", file=sys.stderr)
    return 0
