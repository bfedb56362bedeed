"""Benchmark: decision latency at a 1 s check interval on a real 3-node Kafka 4.1 cluster and on the simulator, one run.

    KAFKA_HOME=../shared/kafka/kafka_2.13-4.1.0 python3 -m bench.real_latency --decisions 120 --interval 1

First a real KRaft cluster from KAFKA_HOME (3 combined nodes, 2 log dirs each, Kafka's default JVM settings, 1 GiB
heap) observed by `quota-pipeline run` with the decision topic on that same cluster; then the simulator (3 brokers
x 2 log dirs) with the decision topic on a local Tansu broker. Each run discards the records of a warm-up after
the first one, collects --decisions records, and stops the job and its cluster. Latency = time the record is
readable in the topic minus its `observed_at` (the poll's start). Prints one table with both rows.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from rich.console import Console
from rich.table import Table

from bench.host import reference
from bench.stats import percentile
from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import parse_time
from quota_pipeline.demo.local_broker import LocalBroker
from quota_pipeline.simulator import Simulator
from harness.kafka import ClusterSpec, start_cluster
from harness.kafka_props import client_properties, pipeline_properties, prefixed, write_properties
from harness.stream_job import TopicWatcher, start_job

REPO = Path(__file__).resolve().parent.parent

SHARED_KAFKA = REPO.parent / "shared" / "kafka" / "kafka_2.13-4.1.0"
NODES, LOG_DIRS = 3, 2
START_TIMEOUT = 300.0  # Spark's start-up alone took over a minute on the shared 2-CPU machine under load


@dataclass
class Row:
    """One target's result: latencies in seconds, load averages (1 min) when its run started and ended."""

    target: str
    latencies: list[float]
    load_start: float
    load_end: float
    gaps: list[float]  # between consecutive observed_at: the interval the job actually kept
    statuses: dict[str, int]
    log: Path


def load1() -> float:
    return os.getloadavg()[0]


def stop_job(job: subprocess.Popen) -> None:
    """SIGTERM to the job's process group (Spark's JVM included), SIGKILL if it is not gone within 60 s."""
    if job.poll() is not None:
        return
    try:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(10)
    except ProcessLookupError:
        pass


def measure(target: str, work: Path, props: Mapping[str, str], topic_bootstrap: str, topic: str,
            decisions: int, warmup: float, interval: float) -> Row:
    """Run the job on `props` until `decisions` records arrived after the warm-up; always stop it."""
    work.mkdir(parents=True, exist_ok=True)
    conf = write_properties(work / f"{target}.properties", props)
    log = work / f"{target}-job.log"
    load_start = load1()
    watcher = TopicWatcher(topic_bootstrap, topic)
    job = start_job(conf, log, log_batches=True)  # where each micro-batch's time went
    try:
        first = _wait(lambda: watcher.records[0][0] if watcher.records else None, job, START_TIMEOUT,
                      f"{target}: no decision within {START_TIMEOUT:.0f} s of the start; see {log}")
        # The first micro-batches include Python worker start-up; the acceptance is about the steady state.
        kept = lambda: [(a, r) for a, r in list(watcher.records) if a >= first + warmup]  # noqa: E731
        deadline = warmup + decisions * interval * 4 + 60
        _wait(lambda: len(kept()) >= decisions or None, job, deadline,
              f"{target}: fewer than {decisions} decisions within {deadline:.0f} s; see {log}")
        records = kept()[:decisions]
    finally:
        stop_job(job)
        watcher.close()
    statuses: dict[str, int] = {}
    for _, record in records:
        key = f"{record.get('source')}/{record.get('status')}"
        statuses[key] = statuses.get(key, 0) + 1
    observed = [parse_time(r["observed_at"]).timestamp() for _, r in records]
    (work / f"{target}-records.json").write_text(json.dumps([[a, r] for a, r in records]))
    return Row(target, [a - o for (a, _), o in zip(records, observed)], load_start, load1(),
               [b - a for a, b in zip(observed, observed[1:])], statuses, log)


def _wait(attempt: Callable[[], object], job: subprocess.Popen, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        result = attempt()
        if result:
            return result
        if job.poll() is not None:
            raise RuntimeError(f"{what} (the job exited with status {job.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.2)


@contextmanager
def real_cluster() -> Iterator[object]:
    # jvm_opts=None keeps Kafka's G1 and C2 (the tests' fast-start JVM would distort a benchmark); 1g is Kafka's
    # own default heap.
    cluster = start_cluster(ClusterSpec(nodes=NODES, log_dirs=LOG_DIRS, heap="1g", jvm_opts=None))
    try:
        yield cluster
    finally:
        cluster.stop()


def run_real(work: Path, args: argparse.Namespace) -> Row:
    topic = f"bench-decisions-{uuid.uuid4().hex[:8]}"
    with real_cluster() as cluster:
        props = pipeline_properties(cluster, **{
            cfg.CLUSTER_NAME: "real", cfg.OUTPUT_TOPIC: topic, cfg.CHECK_INTERVAL_SECONDS: str(args.interval),
            cfg.VALIDITY: "PT1M", cfg.CHECKPOINT_PATH: str(work / "real-checkpoint")},
            **prefixed(cfg.OUTPUT_KAFKA_PREFIX, client_properties(cluster)))
        return measure("real", work, props, cluster.bootstrap(), topic, args.decisions, args.warmup, args.interval)


def run_simulated(work: Path, args: argparse.Namespace) -> Row:
    topic = f"bench-decisions-{uuid.uuid4().hex[:8]}"
    # The same disks as bench/stream_latency.py: half full, growing slowly, never near the limit.
    sim = Simulator({"cluster_id": "bench", "brokers": NODES, "log_dirs": LOG_DIRS,
                     "defaults": {"total_bytes": "1TB", "used_ratio": 0.5, "fill_rate": "100MB"}}, port=0).start()
    try:
        broker = LocalBroker().start()
        try:
            props = {cfg.HARD_BYTES: "1", cfg.BOOTSTRAP: sim.bootstrap_servers,
                     f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers": broker.bootstrap_servers,
                     cfg.CLUSTER_NAME: "sim", cfg.OUTPUT_TOPIC: topic,
                     cfg.CHECK_INTERVAL_SECONDS: str(args.interval), cfg.VALIDITY: "PT1M",
                     cfg.CHECKPOINT_PATH: str(work / "sim-checkpoint")}
            return measure("simulator", work, props, broker.bootstrap_servers, topic, args.decisions, args.warmup,
                           args.interval)
        finally:
            broker.stop()
    finally:
        sim.stop()


def table(rows: list[Row], args: argparse.Namespace) -> Table:
    out = Table(title=f"Decision latency, observed_at -> readable in the topic ({args.interval} s interval, "
                      f"{NODES} x {LOG_DIRS} log dirs, {args.warmup:.0f} s warm-up discarded)")
    for name in ("target", "decisions", "p50 ms", "p90 ms", "p99 ms", "max ms", "interval kept p50 / max s",
                 "load avg start", "load avg end"):
        out.add_column(name, justify="left" if name == "target" else "right")
    labels = {"real": "real Kafka 4.1, 3 nodes", "simulator": "simulator + Tansu"}
    for row in rows:
        ms = [v * 1000 for v in row.latencies]
        out.add_row(labels[row.target], str(len(ms)), *(f"{percentile(ms, p):.0f}" for p in (50, 90, 99)),
                    f"{max(ms):.0f}", f"{percentile(row.gaps, 50):.2f} / {max(row.gaps):.2f}",
                    f"{row.load_start:.1f}", f"{row.load_end:.1f}")
    return out


def _interrupt(signum: int, frame: object) -> None:
    # SIGTERM (timeout, systemd) unwinds like Ctrl-C so that every finally stops what this run started.
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=120, help="decisions measured per target (default 120)")
    ap.add_argument("--interval", type=int, default=1, help="check interval in seconds (default 1)")
    ap.add_argument("--warmup", type=float, default=15.0,
                    help="seconds after the first decision whose records are discarded (default 15)")
    args = ap.parse_args()
    if "KAFKA_HOME" not in os.environ and SHARED_KAFKA.is_dir():
        os.environ["KAFKA_HOME"] = str(SHARED_KAFKA)
    signal.signal(signal.SIGTERM, _interrupt)
    work = Path(tempfile.mkdtemp(prefix="bench-real-latency-"))
    console = Console(width=160)  # the table must not wrap when the output goes to a file
    rows = []
    console.print(f"host reference (bench/host.py): {reference()}")
    for run in (run_real, run_simulated):
        console.print(f"[bold]{run.__name__}[/]: load average {load1():.1f}, work dir {work}")
        rows.append(run(work, args))
        console.print(f"  done: {len(rows[-1].latencies)} decisions, {rows[-1].statuses}")
    console.print(table(rows, args))
    console.print(f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} CPUs; job logs in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
