"""Benchmark: the job killed -9 while a log dir is past the hard limit, restarted from its checkpoint: how long until
it decides again, and whether the decision it published before the kill was still valid then.

    python3 -m bench.restart --restarts 3      # 3 with the archive `run` wrote by itself, then 3 with a hand-made one
    python3 -m bench.restart --restarts 3 --archive all       # also 3 without any archive first (run --no-prepare)
    python3 -m bench.restart --restarts 1 --archive own       # the shortest: a fresh install, one restart
    python3 -m bench.restart --restarts 3 --clusters 10 --brokers 5 --log-dirs 100 --archive prepared
    python3 -m bench.restart --restarts 2 --archive none --standalone 2  # a Spark standalone master, two workers

Simulated clusters (bench/fleet_scale.py's) with every log dir past the hard limit, the decision topic on a local
Tansu broker, the job as `quota-pipeline run --master local[2]` (with --standalone: `./spark-submit.sh` on a Spark
standalone master and that many workers of one core, harness/spark_standalone.py; the class archive is the local
driver's only, so there --archive none). Each round waits for a decision at factor 0 from
the running job, kills its whole process tree with SIGKILL (the driver, Spark's JVM in its own session, the Python
workers), starts it again at once and measures, from the new process's start: the driver up (the job's
"output topic" line, before Spark starts), the first micro-batch's line, and the first record on the topic (its timestamp, set when the
job publishes it). A restart must decide within the validity of the decision published before the kill
(quota.pipeline.throttle.factor.validity.duration, PT1M here): a broker would otherwise fall back. The class
archive of each mode lives in a cache directory of this run's own: `own` starts from an empty one, as a fresh
install does, and waits (unmeasured) for the archive `run` writes in the background after its first decision
before its first kill; `prepared` has the one `quota-pipeline prepare` wrote before the first start; `none` runs
`run --no-prepare` on an empty one. With --archive both (the default) the rounds run first with `own`, then with
`prepared`, in one run. The load average and the host's reference are recorded: the machine is shared.
"""
from __future__ import annotations

import argparse
import calendar
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.fleet_scale import ROOT, TOPIC, _children, _descendants, emit, simulated_clusters, start_job, write_configs
from bench.host import reference
from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import parse_time
from quota_pipeline.demo.local_broker import LocalBroker
from quota_pipeline.session import archive_in_use, archive_path


def kill_tree(pid: int) -> None:
    """SIGKILL to `pid` and every process below it, sessions of their own included (Spark's JVM)."""
    for p in reversed(_descendants(pid, _children())):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_for_line(log: Path, text: bytes, deadline: float) -> bool:
    """Whether `text` appears in `log` before the deadline (polled every 50 ms)."""
    while time.time() < deadline:
        if log.exists() and text in log.read_bytes():
            return True
        time.sleep(0.05)
    return False


def logged_at(log: Path, pattern: str) -> float | None:
    """The time of the first line of `log` matching `pattern`, from its timestamp (RFC 3339 in UTC, as the job logs)."""
    m = re.search(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z .*" + pattern, log.read_text(errors="replace"),
                  re.MULTILINE)
    if m is None:
        return None
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + int(m.group(2)) / 1000


class Topic:
    """The decision topic from the start, record by record."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-restart",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(TOPIC, 0, 0)])

    def next_after(self, t: float, deadline: float, factor: float | None = None) -> dict | None:
        """The first record published after wall time `t` (with `factor`, if given), with its timestamp."""
        while time.time() < deadline:
            msg = self.consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            at = msg.timestamp()[1] / 1000
            record = json.loads(msg.value())
            if at > t and (factor is None or record["throttle_factor"] == factor):
                return {**record, "published": at}
        return None

    def close(self) -> None:
        self.consumer.close()


CACHES = {"none": "no-cache", "own": "own-cache", "prepared": "cache"}  # each mode's XDG_CACHE_HOME under the run's
MODES = {"none": ["none"], "own": ["own"], "prepared": ["prepared"], "both": ["own", "prepared"],
         "all": ["none", "own", "prepared"]}


def use(mode: str, args: argparse.Namespace, work: Path) -> None:
    """The next start's class archive: `mode`'s cache directory, and without one `run` writes none (--no-prepare)."""
    os.environ["XDG_CACHE_HOME"] = str(work / CACHES[mode])
    args.run_options = ["--no-prepare"] if mode == "none" else []


def archive_ready(deadline: float) -> bool:
    """Whether the class archive of XDG_CACHE_HOME is there whole (as a JVM would map it) before the deadline."""
    while time.time() < deadline:
        if archive_in_use(archive_path()):
            return True
        time.sleep(0.5)
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--clusters", type=int, default=1)
    ap.add_argument("--brokers", type=int, default=3, help="brokers per cluster")
    ap.add_argument("--log-dirs", type=int, default=2, help="log dirs per broker")
    ap.add_argument("--interval", type=int, default=10, help="check interval in seconds")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--start-timeout", type=float, default=300, help="seconds to the first decision of a start")
    ap.add_argument("--archive-timeout", type=float, default=900,
                    help="seconds for the archive `run` writes in the background after its first decision (own)")
    ap.add_argument("--archive", choices=tuple(MODES), default="both",
                    help="restart with the JVM class archive `run` wrote by itself from a fresh install (own), with "
                         "the one `quota-pipeline prepare` wrote by hand (prepared), without any (none: run "
                         "--no-prepare); both: own then prepared, all: none, own, prepared; --restarts of each")
    ap.add_argument("--standalone", type=int, default=0, metavar="WORKERS",
                    help="run on a Spark standalone cluster of this many workers (1 core, 1g each)")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()
    if args.restarts < 1 or args.clusters < 1:
        print("error: --restarts and --clusters at least 1", file=sys.stderr)
        return 2
    if args.standalone and args.archive != "none":
        print("error: the class archive is the local driver's only: with --standalone pass --archive none",
              file=sys.stderr)
        return 2
    # Every simulated dir is half full: a hard limit of 60 % available puts all of them past it (factor 0).
    args.property = [f"{cfg.HARD_RATIO}=0.6"]
    args.package_path = None
    args.driver_memory = args.executor_memory = "1g"
    work = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    host_before = reference()
    load_before = os.getloadavg()
    broker = job = topic = None
    rounds, loads = [], []
    modes = MODES[args.archive]
    prepare_s = own = None
    if "prepared" in modes:
        use("prepared", args, work)
        t = time.time()
        subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "prepare"], check=True)
        prepare_s = round(time.time() - t, 1)
    spark = master_url = None
    if args.standalone:
        from harness.spark_standalone import StandaloneCluster

        # The packed environment spark-submit.sh ships is built once, before any clock starts.
        subprocess.run([sys.executable, "-m", "quota_pipeline.commands.submit_environment", str(ROOT / "build")],
                       check=True, stdout=subprocess.DEVNULL)
        spark = StandaloneCluster(work / "spark", workers=args.standalone, memory="1g").start()
        master_url = spark.master_url
    with simulated_clusters(args.clusters, args.brokers, args.log_dirs) as (bootstraps, _):
        try:
            broker = LocalBroker(log_path=work / "tansu.log").start()
            write_configs(work / "clusters", bootstraps, args, broker, work)
            log = work / "job-0.log"
            use(modes[0], args, work)
            job = start_job(args, work / "clusters", log, master_url)
            started = time.time()
            if not wait_for_line(log, b"output topic", started + args.start_timeout):
                raise SystemExit(f"the job did not start; see {log}")
            topic = Topic(broker.bootstrap_servers)
            first = topic.next_after(0, started + args.start_timeout, factor=0.0)
            if first is None:
                raise SystemExit(f"no decision at factor 0 within {args.start_timeout:.0f} s; see {log}")
            print(f"first start: a decision at factor 0 {first['published'] - started:.1f} s after the job's start",
                  flush=True)
            n = 0
            for mode in modes:
                use(mode, args, work)
                if mode == "own":
                    if n:  # a fresh install's first start, as the job's first start was for the first mode
                        kill_tree(job.pid)
                        job.wait(10)
                        log = work / "job-own-install.log"
                        job = start_job(args, work / "clusters", log, master_url)
                        started = time.time()
                        first = topic.next_after(started, started + args.start_timeout)
                        if first is None:
                            raise SystemExit(f"the fresh install's start: no decision; see {log}")
                    # What `run` did by itself: an archive written in the background after its first decision.
                    if not archive_ready(time.time() + args.archive_timeout):
                        raise SystemExit(f"run wrote no class archive within {args.archive_timeout:.0f} s of its "
                                         f"first decision; see {log} and {log.parent / 'run.log'}")
                    own = {"first_start_s": round(first["published"] - started, 2),
                           "archive_ready_after_first_decision_s": round(time.time() - first["published"], 1)}
                    print(f"run wrote its class archive: {json.dumps(own)}", flush=True)
                for _ in range(args.restarts):
                    n += 1
                    last = topic.next_after(time.time() + args.interval / 2, time.time() + 3 * args.interval,
                                            factor=0.0)
                    if last is None:
                        raise SystemExit(f"the running job published nothing at factor 0 for {3 * args.interval} s; "
                                         f"see {log}")
                    loads.append(os.getloadavg()[0])
                    kill_tree(job.pid)
                    job.wait(10)
                    killed = time.time()
                    log = work / f"job-{n}.log"
                    mapped = archive_in_use(archive_path())
                    job = start_job(args, work / "clusters", log, master_url)
                    restarted = time.time()
                    again = topic.next_after(restarted, restarted + args.start_timeout)
                    if again is None:
                        raise SystemExit(f"restart {n}: no decision within {args.start_timeout:.0f} s; see {log}")
                    fresh = again
                    while fresh is not None and parse_time(fresh["observed_at"]).timestamp() < restarted:
                        fresh = topic.next_after(fresh["published"], restarted + args.start_timeout)  # a re-run's
                    wait_for_line(log, b"INFO batch", time.time() + 5)
                    session, batch = logged_at(log, "output topic"), logged_at(log, "INFO batch")
                    measured = logged_at(log, "first decision published")
                    valid_until = parse_time(last["valid_until"]).timestamp()
                    rounds.append({
                        "restart": n, "archive": mode, "archive_mapped": mapped,
                        "first_decision_s": round(again["published"] - restarted, 2),
                        "driver_up_s": round(session - restarted, 2) if session else None,  # then Spark starts
                        "first_new_observation_s": round(fresh["published"] - restarted, 2) if fresh else None,
                        "factor_after": again["throttle_factor"],
                        "valid_left_s": round(valid_until - again["published"], 1),
                        "observed_to_published_s": round(
                            again["published"] - parse_time(again["observed_at"]).timestamp(), 2),
                        "kill_to_restart_s": round(restarted - killed, 2),
                        "first_batch_logged_s": round(batch - restarted, 2) if batch else None,
                        "job_measured_start_logged_s": round(measured - restarted, 2) if measured else None,
                    })
                    print(json.dumps(rounds[-1]), flush=True)
        finally:
            if topic:
                topic.close()
            if job:
                kill_tree(job.pid)
            if broker:
                broker.stop()
            if spark:
                spark.stop()
    firsts = {mode: [r["first_decision_s"] for r in rounds if r["archive"] == mode] for mode in modes}
    summary = {
        "clusters": args.clusters, "volumes": args.clusters * args.brokers * args.log_dirs,
        "master": f"standalone x{args.standalone}" if args.standalone else args.master,
        "restarts": rounds, "prepare_s": prepare_s, "own_archive": own,
        "first_decision_s": {mode: {"median": statistics.median(f), "max": max(f)} for mode, f in firsts.items()},
        "every_decision_after_a_restart_at_factor_0": all(r["factor_after"] == 0.0 for r in rounds),
        "validity_outlasted_every_restart": all(r["valid_left_s"] > 0 for r in rounds),
        "load_average_at_kills": loads, "load_average_before": [round(x, 2) for x in load_before],
        "host_reference": {"before": host_before, "after": reference()},
        "job_logs": str(work / "job-*.log"),
    }
    emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
