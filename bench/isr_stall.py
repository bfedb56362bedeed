"""Benchmark: how long acks=all deliveries stall when the decision topic's follower replica is on a log dir that fails.

    KAFKA_HOME=/work/shared/kafka/kafka_2.13-4.1.0 python3 -m bench.isr_stall --lag-ms 30000 --runs 2

A 2-node KRaft cluster (harness/kafka_stall.py; root for the tmpfs): node 2 leads the topic, node 1 follows from a
32 MiB tmpfs. A producer configured as the pipeline's publisher (idempotent, acks=all; message.timeout.ms 5 min so
that nothing expires) sends one record every --every seconds; the tmpfs is filled to ENOSPC; the run ends a few
records after deliveries resume. Per run: the longest time a record waited for its acknowledgement (the stall), the
fill to the first acknowledgement of a record produced after it, the time the leader logged the ISR shrink, and
the stall bound `quota_pipeline.kafka.stall.longest_stall` gives for the setting.
"""
from __future__ import annotations

import argparse
import re
import threading
import time

from quota_pipeline.kafka.stall import longest_stall
from harness.kafka_stall import LEADER, create_decision_topic, fill, isr, stall_cluster, tmpfs_dir


def one_run(lag_ms: int, every: float, request_timeout_ms: int) -> dict:
    from confluent_kafka import Producer

    cluster = stall_cluster(lag_ms)
    try:
        topic = "decisions"
        create_decision_topic(cluster, topic)
        producer = Producer({**cluster.client_config(), "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 300000, "request.timeout.ms": request_timeout_ms,
                             "log_level": 0})
        sent: dict[int, float] = {}
        acked: dict[int, float] = {}
        lock = threading.Lock()

        def delivered(err, msg) -> None:
            if err is None:
                with lock:
                    acked[int(msg.value())] = time.monotonic()

        def produce(n: int) -> None:
            sent[n] = time.monotonic()
            producer.produce(topic, key=b"cluster", value=f"{n:<1024}".encode(), on_delivery=delivered)
            producer.poll(0)

        n = 0
        for _ in range(int(3 / every)):  # warm: the follower is in sync and fetching
            produce(n)
            n += 1
            producer.poll(every)
        filled_at = time.monotonic()
        fill(tmpfs_dir(cluster))
        first_after = n
        shrunk_at = None
        deadline = filled_at + 3 * max(lag_ms, request_timeout_ms) / 1000 + 30
        while time.monotonic() < deadline:
            if shrunk_at is None and isr(cluster, topic) == [LEADER]:
                shrunk_at = time.monotonic()
            produce(n)
            n += 1
            producer.poll(every)
            with lock:
                stalled = any(acked.get(i, time.monotonic()) - sent[i] > 2 for i in range(first_after, n))
                recent = [i for i in range(first_after, n) if sent[i] < time.monotonic() - 3]
                resumed = len(recent) > 4 and all(acked.get(i, float("inf")) - sent[i] < 1 for i in recent[-4:])
            if stalled and resumed:
                break
        producer.flush(10)
        waits = [acked.get(i, float("inf")) - sent[i] for i in range(n)]
        return {"stall": max(waits), "fill_to_first_ack": min(acked.get(i, float("inf"))
                                                              for i in range(first_after, n)) - filled_at,
                "fill_to_isr": None if shrunk_at is None else shrunk_at - filled_at,
                "shrink_logged": _shrink_line(cluster, topic)}
    finally:
        cluster.stop()


def _shrink_line(cluster, topic: str) -> str:
    """The leader's log line of the ISR shrink (its wall-clock time as logged), or 'not logged'."""
    text = (cluster.nodes[LEADER].logs / "server.log").read_text(errors="replace")
    lines = [line for line in text.splitlines() if topic in line and re.search(r"Shrinking ISR|ISR updated", line)]
    return lines[0][:200] if lines else "not logged"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lag-ms", type=int, default=30000, help="replica.lag.time.max.ms of the cluster")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--request-timeout-ms", type=int, default=30000,
                        help="the producer's request.timeout.ms (librdkafka's default 30000)")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between records")
    args = parser.parse_args()
    bound = longest_stall(args.request_timeout_ms / 1000, args.lag_ms / 1000)
    for run in range(1, args.runs + 1):
        r = one_run(args.lag_ms, args.every, args.request_timeout_ms)
        isr_after = "never" if r["fill_to_isr"] is None else f"{r['fill_to_isr']:.1f} s"
        print(f"replica.lag.time.max.ms={args.lag_ms} request.timeout.ms={args.request_timeout_ms} run {run}: "
              f"longest wait for an acknowledgement {r['stall']:.1f} s, fill -> first acknowledgement of a later "
              f"record {r['fill_to_first_ack']:.1f} s, fill -> ISR without the follower {isr_after} "
              f"(bound {bound:.1f} s); leader's log: {r['shrink_logged']}", flush=True)


if __name__ == "__main__":
    main()
