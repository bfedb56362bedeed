"""What applications lose in a stop, counted record by record: the refusing stop (refuse), this project's quota
throttle (throttle) and Strimzi's plugin 0.3.1 (strimzi), one run per mode on the cluster bench/strimzi_compare.py
starts (3 combined nodes from KAFKA_HOME, a 64 MiB tmpfs log dir each, the load topic with one partition per node,
node 1 filled to 5 % free by its ballast for the stop, then freed; the refusing stop and the throttle decided by
`quota-pipeline run` at PT1S, Strimzi's plugin by itself).

For each stop of --stops, in turn on the mode's cluster, four applications at --rate records/s of --record-bytes
(harness/loss_producers.py, each a process with its own client id and default client settings): a Java producer and
a librdkafka producer that drop a failed record (an application with no handling of its own), and the resending
producers application owners are given (docs/examples/: while writes are refused they hold the records and send the
oldest again every 1 s, and all of them once it is acknowledged). They start 10 s before the fill, keep sending until
30 s after the free, then wait for every record's end (at most 330 s: longer than librdkafka's message.timeout.ms,
300 s, and Java's delivery.timeout.ms, 120 s). Per application: records sent (during the stop), acknowledged,
refused (at least once), timed out (the client's delivery timeout, or a send blocked past max.block.ms), lost (sent
and not acknowledged at the end, also after a resend) and when it was first acknowledged again after the free.
The host's reference (bench/host.py) is recorded before and after.

    python3 -m bench.client_loss --json bench/results/client_loss.json
    python3 -m bench.client_loss --modes refuse --stops 15                 # a smoke run, about 4 minutes
    python3 -m bench.client_loss --from-json bench/results/client_loss.json   # the tables again
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import strimzi_compare as sc
from bench.host import reference
from harness import kafka as rk
from harness import kafka_process as rp
from harness.callback_jar import callback_jar
from harness.loss_producers import BEHAVIOURS, DRAIN_S, JAVA_EXAMPLE, JAVA_SOURCE, LossClient, start_loss_producer
from harness.producers import compile_java

MODES = ("refuse", "throttle", "strimzi")
SYSTEM = {"refuse": "refuse", "throttle": "quota-pipeline", "strimzi": "strimzi"}  # strimzi_compare's names
KINDS = ("java", "librdkafka")
BEFORE_S, AFTER_S = 10.0, 30.0  # the applications send this long before the fill and after the free
START_TIMEOUT_S = 120.0  # every application's first acknowledged record
console = Console()


@dataclass
class Loss:
    """One application through one stop."""

    mode: str
    stop_s: float
    kind: str  # java, librdkafka
    behaviour: str  # drop, resend
    client_id: str
    sent: int
    sent_in_stop: int  # of those, sent from the fill to the free
    acked: int
    refused: int  # records refused at least once
    timed_out: int
    failed: int  # any other error, or a resend given up
    resent_acked: int  # acknowledged after the example held it (resend only)
    open: int  # not at their end when the application stopped waiting (counted lost)
    lost: int
    back_s: float | None  # free -> its first acknowledged record after it (None: none at all)
    factor0_s: float | None  # fill -> node 1's callback at factor 0 (the stop or throttle there)
    released_s: float | None  # free -> node 1's callback above 0 again


def factor_line(cluster: Any, after: float, zero: bool) -> float | None:
    """Wall time of node 1's first factor line (either plugin's) at or after `after` at 0 (`zero`) or above."""
    return next((t for t, m in rp.log_lines(cluster.nodes[1].logs, sc.FACTOR_LINE, after)
                 if (float(m.group(1) or m.group(2)) == 0.0) == zero), None)


def counted(c: LossClient, key: str, t: float) -> int:
    """The application's count `key` in its last line at or before `t`."""
    return max((d[key] for d in c.lines if d["t_ms"] / 1000 <= t), default=0)


def one_stop(mode: str, stop_s: float, cluster: Any, args: argparse.Namespace, home: Path,
             classes: Path) -> list[Loss]:
    """The four applications through one stop of `stop_s` on the mode's cluster."""
    clients = [start_loss_producer(kind, behaviour, cluster.bootstrap(), sc.TOPIC,
                                   f"{kind}-{behaviour}-{mode}-{stop_s:g}s", args.rate, args.record_bytes, home,
                                   classes) for kind in KINDS for behaviour in BEHAVIOURS]
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not all(counted(c, "acked", time.time()) for c in clients):
            if time.time() > deadline:
                late = [c.client_id for c in clients if not counted(c, "acked", time.time())]
                raise SystemExit(f"error: no record of {', '.join(late)} acknowledged within "
                                 f"{START_TIMEOUT_S:.0f} s; the nodes' logs are in {args.work}")
            time.sleep(0.5)
        time.sleep(BEFORE_S)
        keeper = sc.Ballast(Path(cluster.log_dirs[1][-1]))
        filled = time.time()
        keeper.start()
        say(f"{mode}: node 1 filled to {sc.FILL_TO:.0%} free for {stop_s:g} s")
        time.sleep(stop_s)
        keeper.stop()
        freed = time.time()
        say(f"{mode}: freed; the applications send {AFTER_S:.0f} s more, then wait for their records' ends")
        time.sleep(AFTER_S)
        for c in clients:
            c.stop_sending()
        finals = [c.wait_final(DRAIN_S + 60) for c in clients]
    finally:
        for c in clients:
            c.stop()
    factor0, released = factor_line(cluster, filled, True), factor_line(cluster, freed, False)
    out = []
    for c, f in zip(clients, finals):
        if f is None:
            raise SystemExit(f"error: {c.client_id} printed no final line; its counts are unknown")
        back = c.first_ack_after(freed)
        out.append(Loss(mode, stop_s, c.kind, c.behaviour, c.client_id, f["sent"],
                        counted(c, "sent", freed) - counted(c, "sent", filled), f["acked"], f["refused"],
                        f["timed_out"], f["failed"], f["resent_acked"], f["open"], f["sent"] - f["acked"],
                        None if back is None else back - freed,
                        None if factor0 is None else factor0 - filled,
                        None if released is None else released - freed))
    return out


def run_mode(mode: str, args: argparse.Namespace, jar: Path, home: Path, classes: Path) -> list[Loss]:
    """One cluster for the mode, each stop of --stops on it in turn."""
    system = SYSTEM[mode]
    setting = {"refuse": "topics", "throttle": args.mute, "strimzi": args.strimzi_interval}[mode]
    with sc.plugin_on_classpath(jar):
        cluster = rk.start_cluster(rk.ClusterSpec(nodes=3, log_dirs=1, tmpfs_mb=sc.TMPFS_MB, tmpfs_nodes=3,
                                                  overrides=sc.system_overrides(system, setting)), home)
    job = watcher = None
    try:
        sc.create_topic(cluster)
        if system != "strimzi":  # the refusing stop needs no mute; the job checks one against the brokers' window
            job, watcher = sc.start_pipeline(cluster, args.mute, args.work)
        say(f"{mode}: cluster and {'job' if job else 'plugin'} ready")
        return [loss for stop_s in args.stop_list for loss in one_stop(mode, stop_s, cluster, args, home, classes)]
    finally:
        if job is not None:
            from harness.stream_job import stop_job
            stop_job(job)
        if watcher is not None:
            watcher.close()
        sc.keep_logs(cluster, args.work / f"{mode}-{time.strftime('%H%M%S')}")
        cluster.stop()


def say(text: str) -> None:
    console.print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def rows(losses: list[Loss]) -> list[list[str]]:
    """One row per application and stop: what it sent, what became of it, when it was back."""
    return [[x.mode, f"{x.stop_s:g} s", f"{x.kind}, {x.behaviour}", f"{x.sent} ({x.sent_in_stop})", str(x.acked),
             str(x.refused), str(x.timed_out), f"{x.lost} ({x.lost / x.sent:.1%})" if x.sent else "0",
             _s(x.back_s), f"{_s(x.factor0_s)} / {_s(x.released_s)}"] for x in losses]


HEADERS = ["mode", "stop", "application", "sent (in the stop)", "acknowledged", "refused", "timed out", "lost",
           "free -> acknowledged again", "fill -> factor 0 / free -> above 0 (node 1)"]


def markdown(losses: list[Loss]) -> str:
    """The table as bench/RESULTS.md and docs/broker-side.md hold it."""
    return "\n".join([f"| {' | '.join(HEADERS)} |", "|---" * len(HEADERS) + "|",
                      *(f"| {' | '.join(r)} |" for r in rows(losses))])


def report(result: dict[str, Any]) -> None:
    if not console.is_terminal:  # a log file: the table whole rather than at 80 columns
        console.width = 200
    table = Table(title=f"What applications lose: {result['rate']:g} records/s of {result['record_bytes']} bytes "
                        f"each, default client settings")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("mode", "application") else "right")
    for r in rows([Loss(**d) for d in result["runs"]]):
        table.add_row(*r)
    console.print(table)
    console.print(markdown([Loss(**d) for d in result["runs"]]), highlight=False, soft_wrap=True)
    console.print(f"host reference (bench/host.py): {result['host_reference']}; load average "
                  f"{result['load_before']} -> {result.get('load_after')}", highlight=False)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from refuse, throttle, strimzi "
                        "(all three)")
    parser.add_argument("--stops", default="60,180", help="the stops' lengths in seconds, comma-separated (60,180)")
    parser.add_argument("--rate", type=float, default=100.0, help="records/s each application sends (100)")
    parser.add_argument("--record-bytes", type=int, default=1000, help="each record's size (1000)")
    parser.add_argument("--mute", default="PT60S", help="the throttle's quota.pipeline.throttle.max.mute (PT60S)")
    parser.add_argument("--strimzi-interval", default="2", help="Strimzi's storage.check-interval, seconds (2)")
    parser.add_argument("--strimzi-jar", type=Path, help=f"a Strimzi plugin jar (default: {sc.STRIMZI_JAR}, "
                        "fetched from Maven Central with mvn -f bench/strimzi dependency:copy)")
    parser.add_argument("--callback-jar", type=Path, help="this project's plugin jar (default: built from "
                        "broker-callback/ with mvn package)")
    parser.add_argument("--json", type=Path, help="write the result here (after each mode)")
    parser.add_argument("--from-json", type=Path, help="print the tables of an earlier run")
    args = parser.parse_args(argv)
    args.mode_list = [m for m in args.modes.split(",") if m]
    if not args.mode_list or any(m not in MODES for m in args.mode_list):
        parser.error(f"--modes takes refuse, throttle and strimzi, comma-separated (got {args.modes!r})")
    try:
        args.stop_list = [float(s) for s in args.stops.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--stops takes seconds, comma-separated, e.g. 60,180 (got {args.stops!r})")
    if not args.stop_list or min(args.stop_list) < 5:
        parser.error(f"--stops takes stops of 5 s or more (got {args.stops!r})")
    if args.rate <= 0 or args.record_bytes <= 0:
        parser.error("--rate and --record-bytes take numbers above 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        report(json.loads(args.from_json.read_text()))
        return 0
    try:
        home = rk.kafka_home()
    except rk.KafkaUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("error: the nodes' tmpfs log dirs need root: run it as root", file=sys.stderr)
        return 2
    sc.patch_cluster_start()
    ours = (args.callback_jar or callback_jar()) if {"refuse", "throttle"} & set(args.mode_list) else None
    strimzi = (args.strimzi_jar or sc.ensure_jar(sc.STRIMZI_JAR, ["mvn", "-q", "-B", "-f", str(sc.STRIMZI_POM),
                                                                  "dependency:copy"], "Strimzi's plugin")
               ) if "strimzi" in args.mode_list else None
    args.work = Path(tempfile.mkdtemp(prefix="client-loss-"))
    classes = compile_java(home, args.work / "classes", JAVA_SOURCE, JAVA_EXAMPLE)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=sc.ROOT).stdout.strip()
    result: dict[str, Any] = {"commit": commit, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                              "rate": args.rate, "record_bytes": args.record_bytes, "mute": args.mute,
                              "strimzi_interval": args.strimzi_interval, "stops": args.stop_list,
                              "load_before": round(os.getloadavg()[0], 1), "runs": []}
    result["host_reference"] = {"before": reference()}
    say(f"host reference (bench/host.py) before: {result['host_reference']['before']}; work dir {args.work}")
    for mode in args.mode_list:
        started = time.time()
        result["runs"] += [asdict(x) for x in run_mode(mode, args, strimzi if mode == "strimzi" else ours, home,
                                                       classes)]
        say(f"{mode}: done in {time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f}")
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    result["host_reference"]["after"] = reference()
    result["load_after"] = round(os.getloadavg()[0], 1)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
