"""`quota-pipeline simulate`: run a simulated Kafka cluster (admin wire protocol) until SIGINT/SIGTERM."""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from quota_pipeline.commands.common import configure_logging
from quota_pipeline.simulator import PortInUse, ScenarioError, Simulator, from_flags, load_scenario

EXIT_USAGE = 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a simulated Kafka cluster that answers the admin calls the pipeline uses",
        description="Start N simulated brokers on one host, each a real TCP listener speaking the Kafka protocol "
                    "for ApiVersions, Metadata, DescribeCluster and DescribeLogDirs (KIP-827 byte counts). "
                    "Broker i listens on PORT+i-1 and any of them bootstraps. Disks fill and faults happen as the "
                    "scenario says (docs/simulator.md). Runs until SIGINT/SIGTERM or the scenario's end_after, "
                    "then closes every listener and prints how many requests it served per API.",
    )
    p.add_argument("--scenario", metavar="FILE",
                   help="YAML or JSON scenario (schemas/simulator_scenario.schema.json); without it, "
                        "--brokers healthy brokers with --log-dirs log dirs each")
    p.add_argument("--brokers", type=int, metavar="N", help="number of brokers, ids 1..N (default 3; not with --scenario)")
    p.add_argument("--log-dirs", type=int, metavar="M", help="log dirs per broker (default 1; not with --scenario)")
    p.add_argument("--port", type=int, metavar="P",
                   help="port of broker 1; broker i gets P+i-1 (default: the scenario's, else 29092; 0 = any free block)")
    p.add_argument("--host", metavar="ADDR", help="address to listen on and advertise (default 127.0.0.1)")
    p.add_argument("--speed", type=float, metavar="X",
                   help="simulated seconds per real second, e.g. 60 for a minute per second (default: the scenario's, else 1)")
    p.add_argument("--cluster-id", metavar="ID", help="cluster id to report (default: the scenario's, else sim-cluster)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every connection problem and request error")
    p.set_defaults(func=run)


def build(args: argparse.Namespace) -> Simulator:
    if args.scenario:
        if args.brokers is not None or args.log_dirs is not None:
            raise ScenarioError("--brokers/--log-dirs describe a cluster without a scenario; "
                                "set the brokers in the scenario file instead")
        scenario = load_scenario(args.scenario)
        if args.cluster_id:
            from dataclasses import replace
            scenario = replace(scenario, cluster_id=args.cluster_id)
    else:
        for flag, value in (("--brokers", args.brokers), ("--log-dirs", args.log_dirs)):
            if value is not None and value < 1:
                raise ScenarioError(f"{flag} must be at least 1 (got {value})")
        scenario = from_flags(args.brokers or 3, args.log_dirs or 1, cluster_id=args.cluster_id)
    if args.speed is not None and args.speed <= 0:
        raise ScenarioError(f"--speed must be greater than 0 (got {args.speed})")
    return Simulator(scenario, port=args.port, speed=args.speed, host=args.host)


def run(args: argparse.Namespace) -> int:
    configure_logging(quiet_level=logging.INFO if args.verbose else logging.WARNING)
    try:
        sim = build(args)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        asyncio.run(_serve(sim))
    except PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot listen on {sim.host}: {exc}", file=sys.stderr)
        return 1
    counts = sim.counts.totals()
    served = ", ".join(f"{api}={n}" for api, n in counts.items()) or "none"
    print(f"stopped; all listeners closed. requests served: {served}", flush=True)
    return 0


async def _serve(sim: Simulator) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sim.serve(stop, on_started=_announce)


def _announce(sim: Simulator) -> None:
    ports = sorted(sim.ports.values())
    dirs = sum(len(b.log_dirs) for b in sim.state.brokers.values())
    span = f"{ports[0]}" if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"
    end = f", ends after {sim.scenario.end_after:g} simulated s" if sim.scenario.end_after else ""
    print(f"simulating cluster {sim.state.cluster_id}: {len(ports)} brokers, {dirs} log dirs, "
          f"on {sim.host} ports {span} (broker i on {ports[0]}+i-1), speed {sim.clock.speed:g}x{end}", flush=True)
    if len(ports) <= 20:
        for broker_id, port in sim.ports.items():
            print(f"  broker {broker_id}: {sim.host}:{port}", flush=True)
    print(f"bootstrap.servers={sim.bootstrap_servers}  (Ctrl-C or SIGTERM stops)", flush=True)
