"""Benchmark: one streaming job over a fleet of simulated clusters: decision latency, micro-batch time, memory.

    python3 -m bench.fleet_scale --clusters 50 --brokers 5 --log-dirs 100 --interval 10 --seconds 120
    python3 -m bench.fleet_scale --clusters 1 --brokers 6 --log-dirs 2 --interval 1 --seconds 120
    python3 -m bench.fleet_scale --clusters 50 --standalone 2      # a Spark standalone master and two workers

The simulated clusters run in a child process, the decision topic on a local Tansu broker. The job runs as
`quota-pipeline run --clusters-dir DIR --master local[2] --log-batches` (or through `./spark-submit.sh --master
spark://...` with --standalone). Latency = the record's timestamp in the topic (set when the job publishes it)
minus its observed_at, after a warm-up; the arrival time at this process is printed beside it. Micro-batch
durations and time per Spark stage come from the job's --log-batches lines; RSS is sampled from /proc every
2 s (peak per process group). The load average is printed: the machine is shared; so is the host's reference
(bench/host.py) before and after the run, which tells a slower host from slower code.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from confluent_kafka import Consumer, TopicPartition

from bench.host import reference
from bench.stats import percentile
from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import parse_time
from quota_pipeline.demo.local_broker import LocalBroker, free_port

ROOT = Path(__file__).resolve().parent.parent

TOPIC = "__quota_throttle_factors"
BATCH_LINE = re.compile(r"batch (\d+): (\d+) decisions, observed_at spread (\d+) ms; (.*); collect (\d+) ms, "
                        r"publish (\d+) ms; trigger (\d+) ms")
STAGE = re.compile(r"stage \d+ (\d+) ms \((\d+) tasks")


@contextmanager
def simulated_clusters(n: int, brokers: int, log_dirs: int) -> Iterator[tuple[list[str], int]]:
    """n simulated clusters in a child process: their bootstrap servers and the process's pid."""
    parent, child = multiprocessing.Pipe()
    sims = multiprocessing.Process(target=serve_simulators, args=(n, brokers, log_dirs, child), daemon=True)
    sims.start()
    try:
        yield parent.recv(), sims.pid
    finally:
        parent.send("stop")
        sims.join(30)
        if sims.is_alive():
            sims.kill()


def emit(summary: dict, json_path: str | None) -> None:
    """The summary on stdout, and in `json_path` if given."""
    print(json.dumps(summary, indent=1))
    if json_path:
        Path(json_path).write_text(json.dumps(summary, indent=1) + "\n")


def serve_simulators(n: int, brokers: int, log_dirs: int, conn) -> None:
    """Child process: n simulated clusters; sends their bootstrap servers, runs until told to stop."""
    import asyncio

    from quota_pipeline.simulator import Simulator, server

    # The simulators follow faults and full disks 20 times a second; the bench scripts none, and 100 simulators
    # reconciling that often take a core of the two.
    server.RECONCILE_SECONDS = 2.0
    sims = [Simulator({"cluster_id": f"sim-{i:03d}", "brokers": brokers, "log_dirs": log_dirs,
                       "defaults": {"total_bytes": "1TB", "used_ratio": 0.5, "fill_rate": "1MB"}}, port=0)
            for i in range(n)]

    async def serve_all() -> None:
        # One event loop for all of them: a thread each (Simulator.start) spent the shared cores on handing the
        # GIL from thread to thread, CPU a deployment's clusters never take from the job's machine.
        stop = asyncio.Event()
        served = [asyncio.create_task(s.serve(stop)) for s in sims]
        while not all(s._started.is_set() for s in sims):
            await asyncio.sleep(0.01)
        for task in served:
            if task.done():
                task.result()  # a simulator that could not start: its error, not a bootstrap that never answers
        conn.send([s.bootstrap_servers for s in sims])
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        stop.set()
        await asyncio.gather(*served)

    asyncio.run(serve_all())


# ---- memory ------------------------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree[ppid].append(int(entry))
    return tree


def _descendants(pid: int, tree: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _kind(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "CoarseGrainedExecutorBackend" in cmd:
        return "executor JVM"
    if "java" in cmd.split(" ")[0]:
        return "driver JVM"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd or "pyspark.worker" in cmd:
        return "python workers"
    return "driver python"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class Cpu:
    """CPU seconds per part of the machine's work over the measured window: the job (driver, JVM, Python workers) and
    the simulated clusters, which share the job's two cores here and would not in a deployment."""

    parts: dict[str, list[int]]
    start: dict[str, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    began: float = 0.0
    seconds: float = 0.0

    def _now(self) -> dict[str, float]:
        tree = _children()
        return {name: sum(_cpu_seconds(p) for root in roots for p in _descendants(root, tree))
                for name, roots in self.parts.items()}

    def begin(self) -> None:
        self.start, self.began = self._now(), time.monotonic()

    def end(self) -> None:
        if self.start:
            self.used = {k: v - self.start.get(k, 0.0) for k, v in self._now().items()}
            self.seconds = time.monotonic() - self.began

    def per_interval(self, interval: float) -> dict[str, float]:
        """CPU seconds per check interval (two cores give 2 x interval)."""
        return {k: round(v * interval / self.seconds, 2) for k, v in sorted(self.used.items())} if self.seconds else {}


@dataclass
class Memory:
    """Peak RSS (MB) per kind of process, summed over the processes of that kind at each sample."""

    peak: dict[str, float] = field(default_factory=dict)

    def sample(self, job_pid: int, executor_parents: list[int]) -> None:
        tree = _children()
        sums: dict[str, float] = defaultdict(float)
        for pid in _descendants(job_pid, tree):
            sums[_kind(pid)] += _rss_mb(pid)
        for parent in executor_parents:  # standalone: the workers' children are the executors
            for pid in _descendants(parent, tree)[1:]:
                kind = _kind(pid)
                sums["executor JVM" if kind == "executor JVM" else "executor python"] += _rss_mb(pid)
        sums["total"] = sum(sums.values())
        for k, v in sums.items():
            self.peak[k] = max(self.peak.get(k, 0.0), v)


# ---- the run -----------------------------------------------------------------------------------------------

def write_configs(directory: Path, bootstraps: list[str], args: argparse.Namespace, broker: LocalBroker,
                  work: Path) -> None:
    directory.mkdir()
    for i, bootstrap in enumerate(bootstraps):
        (directory / f"c{i:03d}.properties").write_text("\n".join([
            f"{cfg.HARD_RATIO}=0.1", f"{cfg.CHECK_INTERVAL_SECONDS}={args.interval}", f"{cfg.VALIDITY}=PT1M",
            f"{cfg.BOOTSTRAP}={bootstrap}", f"{cfg.CLUSTER_NAME}=c{i:03d}",
            f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
            f"{cfg.CHECKPOINT_PATH}={work / 'checkpoint'}", f"{cfg.METRICS_PORT}={free_port()}",
            *args.property]) + "\n")


def start_job(args: argparse.Namespace, clusters: Path, log: Path, master_url: str | None) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    if args.package_path:  # e.g. a copy of an earlier commit's package, to measure before and after a change
        env["PYTHONPATH"] = args.package_path + os.pathsep + env.get("PYTHONPATH", "")
    if master_url:
        cmd = [str(ROOT / "spark-submit.sh"), "--master", master_url, "--driver-memory", args.driver_memory,
               "--executor-memory", args.executor_memory, "--clusters-dir", str(clusters), "--no-metrics",
               "--log-batches"]
    else:
        cmd = [sys.executable, "-m", "quota_pipeline.cli", "run", "--clusters-dir", str(clusters), "--no-metrics",
               "--log-batches", "--master", args.master, *getattr(args, "run_options", [])]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, cwd=log.parent,
                            start_new_session=True)


def stop_job(job: subprocess.Popen) -> None:
    if job.poll() is None:
        os.kill(job.pid, signal.SIGTERM)  # the driver stops after the running batch and ends its JVM
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(10)


def follow(args: argparse.Namespace, broker: LocalBroker, job: subprocess.Popen, log: Path, memory: Memory,
           executor_parents: list[int], cpu: Cpu) -> tuple[list[tuple[float, float, str, float]], list[float]]:
    """(topic timestamp, arrival, cluster, observed_at) of every record after the warm-up, and load samples."""
    deadline = time.time() + args.start_timeout
    while b"output topic" not in log.read_bytes():
        if time.time() > deadline or job.poll() is not None:
            raise SystemExit(f"the job did not start; see {log}")
        time.sleep(0.5)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "bench",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    records: list[tuple[float, float, str, float]] = []
    loads: list[float] = []
    first = None
    next_sample = 0.0
    try:
        while first is None or time.time() - first < args.warmup + args.seconds:
            if first is None and time.time() > deadline:
                raise SystemExit(f"no decision within {args.start_timeout:.0f} s of the start; see {log}")
            if time.time() >= next_sample:
                memory.sample(job.pid, executor_parents)
                loads.append(os.getloadavg()[0])
                next_sample = time.time() + 2
            msg = consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            arrived = time.time()
            first = first or arrived
            record = json.loads(msg.value())
            observed = parse_time(record["observed_at"]).timestamp()
            if observed >= first + args.warmup:
                if not records:
                    cpu.begin()
                records.append((msg.timestamp()[1] / 1000, arrived, record["cluster_id"], observed))
    finally:
        cpu.end()
        consumer.close()
    return records, loads


def batches(log: Path, since_batch: int) -> list[dict]:
    out = []
    for m in BATCH_LINE.finditer(log.read_text(errors="replace")):
        if int(m.group(1)) >= since_batch:
            stages = [(int(ms), int(tasks)) for ms, tasks in STAGE.findall(m.group(4))]
            out.append({"batch": int(m.group(1)), "decisions": int(m.group(2)), "spread_ms": int(m.group(3)),
                        "stages": stages, "collect_ms": int(m.group(5)), "publish_ms": int(m.group(6)),
                        "trigger_ms": int(m.group(7))})
    return out


def summarize(args: argparse.Namespace, records: list, loads: list[float], memory: Memory, log: Path,
              cpu: Cpu | None = None) -> dict:
    latency = [ts - observed for ts, _, _, observed in records]
    arrival = [arrived - observed for _, arrived, _, observed in records]
    by_cluster: dict[str, list[float]] = defaultdict(list)
    for _, _, cluster, observed in records:
        by_cluster[cluster].append(observed)
    gaps = [b - a for times in by_cluster.values() for a, b in zip(sorted(times), sorted(times)[1:])]
    # Batches of the measured window: the last ones, as many as the window has intervals; never the first two
    # (Python workers and the state store start in them).
    measured = batches(log, 2)[-max(1, int(args.seconds / args.interval)):]
    stage_ms = defaultdict(list)
    for b in measured:
        for i, (ms, _) in enumerate(b["stages"]):
            stage_ms["poll" if i == 0 else "decide" if i == len(b["stages"]) - 1 else f"stage{i}"].append(ms)
    return {
        "clusters": args.clusters, "volumes": args.clusters * args.brokers * args.log_dirs,
        "interval_s": args.interval, "master": "standalone x%d" % args.standalone if args.standalone else args.master,
        "decisions": len(records), "clusters_seen": len(by_cluster),
        "latency_s": {"p50": percentile(latency, 50), "p99": percentile(latency, 99), "max": max(latency, default=0)},
        "arrival_latency_s": {"p50": percentile(arrival, 50), "p99": percentile(arrival, 99)},
        "observation_gap_s": {"p50": percentile(gaps, 50), "max": max(gaps, default=0)},
        "batch_ms": {"p50": percentile([b["trigger_ms"] for b in measured], 50),
                     "max": max((b["trigger_ms"] for b in measured), default=0)},
        "observed_at_spread_ms": {"p50": percentile([b["spread_ms"] for b in measured], 50),
                                  "max": max((b["spread_ms"] for b in measured), default=0)},
        "stage_ms_p50": {k: percentile(v, 50) for k, v in stage_ms.items()},
        "collect_ms_p50": percentile([b["collect_ms"] for b in measured], 50),
        "publish_ms_p50": percentile([b["publish_ms"] for b in measured], 50),
        "batches_measured": len(measured),
        "rss_peak_mb": {k: round(v) for k, v in sorted(memory.peak.items())},
        "cpu_seconds_per_interval": cpu.per_interval(args.interval) if cpu else {},
        "load_average": {"min": min(loads, default=0), "mean": statistics.mean(loads) if loads else 0,
                         "max": max(loads, default=0)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--brokers", type=int, default=5, help="brokers per cluster")
    ap.add_argument("--log-dirs", type=int, default=100, help="log dirs per broker")
    ap.add_argument("--interval", type=int, default=10, help="check interval in seconds")
    ap.add_argument("--seconds", type=float, default=120, help="measurement window, after the warm-up")
    ap.add_argument("--warmup", type=float, default=30, help="seconds after the first record left out")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--standalone", type=int, default=0, metavar="WORKERS",
                    help="run on a Spark standalone cluster of this many workers (1 core, --worker-memory each)")
    ap.add_argument("--worker-memory", default="1g")
    ap.add_argument("--executor-memory", default="1g")
    ap.add_argument("--driver-memory", default="1g")
    ap.add_argument("--start-timeout", type=float, default=400, help="seconds to the first decision")
    ap.add_argument("--package-path", help="directory put first on the job's PYTHONPATH (an earlier package)")
    ap.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    host_before = reference()
    load_before = os.getloadavg()
    broker = spark = job = None
    log = work / "job.log"
    memory = Memory()
    cpu = None
    with simulated_clusters(args.clusters, args.brokers, args.log_dirs) as (bootstraps, sims_pid):
        try:
            broker = LocalBroker(log_path=work / "tansu.log").start()
            write_configs(work / "clusters", bootstraps, args, broker, work)
            master_url = None
            if args.standalone:
                from harness.spark_standalone import StandaloneCluster

                spark = StandaloneCluster(work / "spark", workers=args.standalone, memory=args.worker_memory)
                spark.start(wait=False)
                master_url = spark.master_url
            job = start_job(args, work / "clusters", log, master_url)
            if spark:
                spark.wait_for_workers(120)
            cpu = Cpu({"job": [job.pid, *(spark.pids()[1:] if spark else [])], "simulated clusters": [sims_pid]})
            records, loads = follow(args, broker, job, log, memory, spark.pids()[1:] if spark else [], cpu)
        finally:
            if job:
                stop_job(job)
            if spark:
                spark.stop()
            if broker:
                broker.stop()
    summary = summarize(args, records, loads, memory, log, cpu)
    summary["load_average_before"] = [round(x, 2) for x in load_before]
    summary["host_reference"] = {"before": host_before, "after": reference()}
    summary["job_log"] = str(log)
    emit(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
