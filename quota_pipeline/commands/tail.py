"""`quota-pipeline tail --config CONF`: the dashboard's facts in a terminal, or the records as JSON lines."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING

from quota_pipeline.commands.common import add_config_argument, configure_logging, fail
from quota_pipeline.core.display import visible
from quota_pipeline.commands.dashboard import add_feed_arguments, load_feed_config, quiet_kafka

from quota_pipeline.reader.log_text import printable

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from quota_pipeline.dashboard.feed import Feed
    from quota_pipeline.dashboard.history import Refused
    from quota_pipeline.dashboard.plans import PlanWatcher

EXIT_UNAVAILABLE = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tail",
        help="the dashboard's facts in the terminal (for SSH sessions); --json prints the records as they arrive",
        description="Follow the decision topic like `dashboard` does and show, refreshed every second: whether "
                    "the topic can be read, every cluster riskiest first (factor in force, since when below 1, "
                    "age of the last decision, closest log dir, ETA to the hard limit, missing brokers), and the "
                    "details of the clusters at risk (why, the log dirs closest to the limit, their largest "
                    "partitions). Ctrl-C stops. Exit code 1 when --once cannot read the topic.",
    )
    add_config_argument(p, "a pipeline .properties file: the topic, its cluster, the check interval and the fallback")
    p.add_argument("--json", action="store_true",
                   help="print every record's JSON value on one line as it arrives (history first); records that "
                        "cannot be read and changes of the topic's availability go to stderr")
    p.add_argument("--once", action="store_true",
                   help="read the topic up to its end, print once and exit")
    p.add_argument("--catch-up-timeout", type=float, default=15.0, metavar="SECONDS",
                   help="with --once: how long to wait for the topic (default 15)")
    p.add_argument("--plan", action="store_true",
                   help="also show `remedy`'s current plan for the cluster CONFIG observes whenever a log dir needs "
                        "one (at or past its soft limit: a stopped or nearly stopped cluster); re-read every 30 s")
    add_feed_arguments(p)
    p.set_defaults(func=run)


def print_record(key: bytes | None, value: bytes | None, where: str, readable: bool) -> None:
    """--json: readable values to stdout as one compact line; the rest to stderr, in words."""
    name = "no key" if key is None else f"'{visible(key.decode('utf-8', 'backslashreplace'))}'"
    if value is None:
        print(f"tombstone for {name} {visible(where)}: read as absence, the decision in force stays until its "
              "valid_until", file=sys.stderr, flush=True)
    elif readable:
        print(json.dumps(json.loads(value), separators=(",", ":")), flush=True)
    else:
        print(f"unreadable record {visible(where)} (key {name}): not a decision record", file=sys.stderr, flush=True)


def print_refused(refused: Refused) -> None:
    """--json: a record refused as brokers refuse it goes to stderr, with where it is and why."""
    print(f"refused record {printable(refused.where)[1:-1]} (key {printable(refused.key)}): {refused.reason}",
          file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from quota_pipeline.dashboard.feed import Feed

    configure_logging(args.verbose, quiet_level=logging.WARNING)
    quiet_kafka(args.verbose)
    conf, window = load_feed_config(args)
    if not args.json and not args.verbose:  # the view itself says how the topic stands
        logging.getLogger("quota_pipeline.dashboard").setLevel(logging.ERROR)
    if args.plan and (args.json or not conf.bootstrap_servers):
        fail("--plan shows remedy's plan in the terminal view: it needs CONFIG's "
             "client.quota.callback.static.kafka.admin.bootstrap.servers and no --json")
    feed = Feed.of(conf, window, args.max_points, tap=print_record if args.json else None,
                   on_refused=print_refused if args.json else None).start()
    plans = _watcher(conf, once=args.once) if args.plan else None
    try:
        if args.once:
            return _once(feed, args, plans)
        if args.json:
            while True:
                time.sleep(1)
        return _live(feed, plans)
    finally:
        feed.close()
        if plans is not None:
            plans.close()


def _watcher(conf, once: bool) -> PlanWatcher:
    """remedy's plan read in the background (--once: read now, before printing)."""
    from quota_pipeline.dashboard.plans import PlanWatcher
    from quota_pipeline.kafka.remedy_admin import RemedyAdmin

    watcher = PlanWatcher(conf, lambda: RemedyAdmin(conf.admin))
    if once:
        with RemedyAdmin(conf.admin) as admin:
            watcher.seen = watcher.read_once(admin)
        return watcher
    return watcher.start()


def _once(feed: Feed, args: argparse.Namespace, plans: PlanWatcher | None = None) -> int:
    deadline = time.monotonic() + args.catch_up_timeout
    while not feed.follower.status().caught_up and time.monotonic() < deadline:
        time.sleep(0.1)
    status = feed.follower.status()
    if not args.json:
        _console().print(_view(feed, plans))
    if not status.caught_up:
        print(f"error: could not read {status.topic} within {args.catch_up_timeout:g} s: {visible(status.message)}",
              file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0


def _live(feed: Feed, plans: PlanWatcher | None = None) -> int:
    from rich.live import Live

    with Live(_view(feed, plans), console=_console(), refresh_per_second=1, screen=False) as live:
        while True:
            time.sleep(1)
            live.update(_view(feed, plans))


def _view(feed: Feed, plans: PlanWatcher | None = None) -> RenderableType:
    from rich.console import Group

    from quota_pipeline.dashboard import plans as plan_view, terminal

    now = feed.clock.now()
    view = terminal.render(feed.overview(), feed.follower.status(), now, feed.settings,
                           feed.history.unreadable_total, (feed.history.refused_total, feed.history.last_refused))
    return view if plans is None else Group(view, plan_view.render(plans.seen))


def _console() -> Console:
    from rich.console import Console
    console = Console()
    return console if console.is_terminal else Console(width=160)  # piped: no terminal width to fit
