"""`quota-pipeline dashboard --config CONF`: a web page over the decision topic."""
from __future__ import annotations

import argparse
import datetime as dt
import logging

import isodate

from quota_pipeline.commands.common import add_config_argument, configure_logging, fail, load_or_exit
from quota_pipeline.core.config import Config

DEFAULT_PORT = 8404
DEFAULT_WINDOW = "PT6H"
DEFAULT_MAX_POINTS = 3600


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="a web page over the decision topic: factor in force, why and since when, closest log dirs, ETA",
        description="Follow the decision topic (quota.pipeline.output.topic on the quota.pipeline.output.kafka.* "
                    "cluster, else the admin cluster) from the beginning, as brokers do, and serve a page: "
                    "every cluster riskiest first; for the selected one the factor in force with its source "
                    "and age, since when it is below 1 (stopped or throttled) and why, the log dirs closest to the hard limit with "
                    "their ETA and largest partitions, missing brokers, and timelines of the factor and of the "
                    "minimum available ratio. It warns when a cluster has had no decision for more than two "
                    "check intervals, and says so when the topic or its cluster cannot be reached (it keeps "
                    "retrying). Needs nothing but the topic.",
    )
    add_config_argument(p, "a pipeline .properties file: the topic, its cluster, the check interval and the fallback")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to serve on (default {DEFAULT_PORT}; 0: any)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only; the page has no login: "
                        "expose it only behind a proxy that has one)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a Host header name to answer besides loopback and --host: the name a proxy or an Ingress "
                        "serves the page under (repeat for several); any other name is refused (421), which keeps "
                        "pages elsewhere from reaching it through DNS rebinding")
    p.add_argument("--plan", action="store_true",
                   help="also show `remedy`'s current plan for the cluster CONFIG observes whenever a log dir needs "
                        "one (a stopped or nearly stopped cluster); read every 30 s through the Admin API")
    add_feed_arguments(p)
    p.set_defaults(func=run)


def add_feed_arguments(p: argparse.ArgumentParser) -> None:
    """The history bound and logging options `dashboard` and `tail` share."""
    p.add_argument("--window", default=DEFAULT_WINDOW, metavar="DURATION",
                   help=f"history kept per cluster, ISO-8601 (default {DEFAULT_WINDOW})")
    p.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS, metavar="N",
                   help=f"at most this many decisions kept per cluster (default {DEFAULT_MAX_POINTS})")
    p.add_argument("-v", "--verbose", action="store_true", help="log the Kafka client's details")


def load_feed_config(args: argparse.Namespace) -> tuple[Config, dt.timedelta]:
    """The configuration and the history window, or one error line and exit code 2."""
    conf = load_or_exit(args.config, require_admin=False)
    if not conf.output_settings.get("bootstrap.servers"):
        fail(f"{args.config}: no cluster holds the decision topic: set quota.pipeline.output.kafka.bootstrap.servers "
             "(or client.quota.callback.static.kafka.admin.bootstrap.servers)")
    try:
        window = isodate.parse_duration(args.window)
    except (isodate.ISO8601Error, ValueError):
        fail(f"--window: not an ISO-8601 duration (got {args.window}); for example PT6H")
    if not isinstance(window, dt.timedelta) or window <= dt.timedelta(0):
        fail(f"--window: must be a positive duration in days, hours, minutes or seconds (got {args.window})")
    if args.max_points < 1:
        fail(f"--max-points: must be at least 1 (got {args.max_points})")
    return conf, window


def quiet_kafka(verbose: bool) -> None:
    """librdkafka's connection chatter stays out of the terminal: the feed status says it in words."""
    from quota_pipeline.dashboard.follower import LIBRDKAFKA_LOG
    LIBRDKAFKA_LOG.setLevel(logging.DEBUG if verbose else logging.CRITICAL)


def run(args: argparse.Namespace) -> int:
    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.server import DashboardServer, bind

    configure_logging(args.verbose, quiet_level=logging.WARNING)
    quiet_kafka(args.verbose)
    conf, window = load_feed_config(args)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        fail(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); choose another port with --port")
    if args.plan and not conf.bootstrap_servers:
        fail("--plan shows remedy's plan for the cluster CONFIG observes: set "
             "client.quota.callback.static.kafka.admin.bootstrap.servers")
    feed = Feed.of(conf, window, args.max_points).start()
    plans = plan_watcher(conf) if args.plan else None
    # Its Host header is accepted, with loopback names and those allowed.
    server = DashboardServer(feed, sock, host=args.host, extra_hosts=tuple(args.allowed_host), plans=plans)
    print(f"dashboard on {server.url} following {conf.output_topic} on {feed.follower.bootstrap} "
          f"(Ctrl-C stops)", flush=True)
    try:
        server.run()
    finally:
        feed.close()
        if plans is not None:
            plans.close()
    return 0


def plan_watcher(conf: Config):
    """remedy's plan for the cluster CONFIG observes, read in the background (dashboard.plans)."""
    from quota_pipeline.dashboard.plans import PlanWatcher
    from quota_pipeline.kafka.remedy_admin import RemedyAdmin

    return PlanWatcher(conf, lambda: RemedyAdmin(conf.admin)).start()
