"""Benchmark: end-to-end latency of the streaming job, snapshot observed_at -> record readable in the topic.

    python3 -m bench.stream_latency --seconds 120 --brokers 6 --log-dirs 2

Starts a simulated cluster and a local Tansu broker, runs `quota-pipeline run` (1 s check interval) as
an operator would, follows the decision topic and prints p50/p90/p99/max of (arrival - observed_at).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from bench.stats import percentile
from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import parse_time
from quota_pipeline.simulator import Simulator
from quota_pipeline.demo.local_broker import LocalBroker, free_port


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120, help="measurement window after the first record")
    ap.add_argument("--brokers", type=int, default=6)
    ap.add_argument("--log-dirs", type=int, default=2)
    ap.add_argument("--interval", type=int, default=1, help="check interval in seconds")
    ap.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                    help="another property of the job's config, e.g. quota.pipeline.journal.period=PT1M")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    sim = Simulator({"cluster_id": "bench", "brokers": args.brokers, "log_dirs": args.log_dirs,
                     "defaults": {"total_bytes": "1TB", "used_ratio": 0.5, "fill_rate": "100MB"}}, port=0).start()
    broker = LocalBroker().start()
    conf = work / "bench.properties"
    conf.write_text("\n".join([
        f"{cfg.HARD_RATIO}=0.1", f"{cfg.CHECK_INTERVAL_SECONDS}={args.interval}", f"{cfg.VALIDITY}=PT1M",
        f"{cfg.BOOTSTRAP}={sim.bootstrap_servers}",
        f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
        f"{cfg.CHECKPOINT_PATH}={work / 'checkpoint'}", f"{cfg.METRICS_PORT}={free_port()}", *args.property]) + "\n")
    log = (work / "job.log").open("wb")
    job = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "run", str(conf), "--no-metrics"],
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    latencies: list[float] = []
    try:
        consumer = None
        deadline = time.time() + 180
        while consumer is None and time.time() < deadline:
            time.sleep(0.5)
            if b"output topic" in (work / "job.log").read_bytes():
                consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "bench",
                                     "enable.auto.commit": False})
                consumer.assign([TopicPartition("__quota_throttle_factors", 0, 0)])
        if consumer is None:
            print("job did not start; see", work / "job.log", file=sys.stderr)
            return 1
        first = None
        while first is None or time.time() - first < args.seconds:
            msg = consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            arrived = time.time()
            first = first or arrived
            record = json.loads(msg.value())
            latencies.append(arrived - parse_time(record["observed_at"]).timestamp())
        consumer.close()
    finally:
        os.kill(job.pid, signal.SIGTERM)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
        broker.stop()
        sim.stop()
    print(f"{len(latencies)} decisions over {args.seconds:.0f}s, {args.brokers}x{args.log_dirs} log dirs, "
          f"{args.interval}s interval; job log {work / 'job.log'}")
    print(f"latency observed_at -> readable in topic: p50 {percentile(latencies, 50):.3f}s, "
          f"p90 {percentile(latencies, 90):.3f}s, p99 {percentile(latencies, 99):.3f}s, "
          f"max {max(latencies):.3f}s, mean {statistics.mean(latencies):.3f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
