"""Benchmark: Observer.poll() of a 500-broker x 12-log-dir simulated cluster served by one simulator process."""
from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import subprocess
import sys
import time

from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import Status
from quota_pipeline.kafka.observer import Observer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--brokers", type=int, default=500)
    parser.add_argument("--log-dirs", type=int, default=12)
    parser.add_argument("--port", type=int, default=31000, help="first port of the simulator's block")
    parser.add_argument("--runs", type=int, default=10, help="timed polls after the first (connecting) one")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)

    # The simulator runs in its own process, as it would against a real client: the two do not share a GIL.
    sim = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "simulate", "--brokers", str(args.brokers),
                            "--log-dirs", str(args.log_dirs), "--port", str(args.port)],
                           stdout=subprocess.PIPE, text=True)
    try:
        for line in sim.stdout:  # type: ignore[union-attr]
            if line.startswith("bootstrap.servers="):
                break
        else:
            print("error: the simulator did not start", file=sys.stderr)
            return 1
        conf = cfg.parse({cfg.BOOTSTRAP: f"127.0.0.1:{args.port}", cfg.HARD_RATIO: "0.05",
                          cfg.CHECK_INTERVAL_ISO: "PT10S"}, "<bench>")
        expected = args.brokers * args.log_dirs
        with Observer(conf) as observer:
            t0 = time.perf_counter()
            first = observer.poll()
            connect = time.perf_counter() - t0
            check(first, expected)
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                snap = observer.poll()
                times.append(time.perf_counter() - t0)
                check(snap, expected)
    finally:
        sim.terminate()
        tail = sim.communicate(timeout=30)[0].strip().splitlines()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"cluster: {args.brokers} brokers x {args.log_dirs} log dirs = {expected} volumes, one simulator process")
    print(f"first observe (opens {args.brokers} connections): {connect:.3f} s")
    print(f"observe, {args.runs} runs on open connections: min {min(times):.3f} s, "
          f"median {statistics.median(times):.3f} s, max {max(times):.3f} s")
    print(f"simulator: {tail[-1] if tail else '(no output)'}")
    return 0


def check(snap, expected: int) -> None:
    if snap.status is not Status.SUCCESS or len(snap.volumes) != expected:
        raise SystemExit(f"error: expected SUCCESS with {expected} volumes, got {snap.status.value} "
                         f"with {len(snap.volumes)}: {snap.message}")


if __name__ == "__main__":
    sys.exit(main())
