"""The broker's quota sensors and heap while the factor flaps between 0 and 0.1 every second (issue 24).

A 1-node Kafka (KAFKA_HOME) loads the callback (static.produce 2 MB/s, so 0.1 is a graded factor and 0 a stop); 100
clients (librdkafka instances with their own client ids, one process) each send a 1 kB record every second; the
decision topic on the same broker gets 0.0 and 0.1 alternately every second for --minutes. Every 30 s: the count of
the broker's produce-quota MBeans (`kafka.server:type=Produce,*`, one per quota sensor) and the heap used after a
full GC (`jcmd GC.run`, `GC.heap_info`). Kafka keeps an idle sensor for an hour, so a callback that opened a new
window per cut would grow by 100 sensors a second here.

    python3 -m bench.sensor_flap --minutes 10 --clients 100
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench import strimzi_compare as sc
from harness import kafka as rk
from harness import kafka_process as rp

PRODUCE_MBEANS = "kafka.server:type=Produce,*"


def produce_mbeans(home: Path, node_id: int, root: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "CLASSPATH")}
    env.update(KAFKA_HEAP_OPTS="-Xmx64m", LOG_DIR=str(root / "jmxtool-logs"), KAFKA_JVM_PERFORMANCE_OPTS=rp.FAST_START_JVM)
    done = subprocess.run([str(home / "bin" / "kafka-run-class.sh"), "org.apache.kafka.tools.JmxTool", "--jmx-url",
                           f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{sc.JMX_BASE + node_id}/jmxrmi", "--object-name",
                           PRODUCE_MBEANS, "--one-time", "true", "--report-format", "properties"],
                          env=env, capture_output=True, text=True, timeout=120)
    return len({line.split(":", 1)[0] + ":" + line.split(":", 2)[1] for line in done.stdout.splitlines()
                if line.startswith("kafka.server:type=Produce")})


def heap_after_gc(pid: int) -> float:
    """MB of heap used right after a full GC of the broker JVM."""
    subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120)
    out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=120).stdout
    used = re.findall(r"used (\d+)K", out)
    return sum(int(u) for u in used[:1]) / 1024 if used else float("nan")


def broker_java_pid(cluster) -> int:
    shell = cluster.nodes[1].process.pid
    children = subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()
    return int(children[0]) if children else shell  # kafka-run-class.sh execs java: usually the same pid


def clients(bootstrap: str, n: int, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        from confluent_kafka import Producer
        producers = [Producer({"bootstrap.servers": bootstrap, "client.id": f"flap-{i}", "acks": "1",
                               "linger.ms": 0}) for i in range(n)]
        while not stop.is_set():
            for p in producers:
                try:
                    p.produce("load", bytes(1000))
                except BufferError:
                    pass
                p.poll(0)
            time.sleep(1.0)
        for p in producers:
            p.purge()
            p.flush(0)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def flapper(bootstrap: str, topic: str, stop: threading.Event, flips: list[int]) -> threading.Thread:
    def run() -> None:
        from confluent_kafka import Producer
        from quota_pipeline.core.properties import PUBLISHER_CLIENT_ID
        from harness.kafka_client import decision
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": PUBLISHER_CLIENT_ID, "acks": "all",
                             "linger.ms": 0})
        factor = 0.0
        while not stop.is_set():
            now = dt.datetime.now(dt.timezone.utc)
            producer.produce(topic, key=b"bench", value=json.dumps(decision("bench", factor, now).to_json()))
            producer.poll(0)
            flips[0] += 1
            factor = 0.1 if factor == 0.0 else 0.0
            time.sleep(1.0)
        producer.flush(10)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples (30)")
    args = parser.parse_args(argv)
    try:
        home = rk.kafka_home()
    except rk.KafkaUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sc._patch_cluster_start()
    jar = sc.callback_jar()
    os.environ["CLASSPATH"] = str(jar)
    try:
        cluster = rk.start_cluster(rk.ClusterSpec(nodes=1, log_dirs=1, heap="512m", overrides={
            "client.quota.callback.class": sc.PIPELINE_CLASS, "quota.pipeline.cluster.name": "bench",
            sc.P + "produce": "2000000", sc.P + "kafka.admin.bootstrap.servers": sc.SELF,
            "quota.pipeline.throttle.max.mute": "PT60S"}), home)
    finally:
        del os.environ["CLASSPATH"]
    stop = threading.Event()
    flips = [0]
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        from quota_pipeline.core.properties import DEFAULT_OUTPUT_TOPIC
        admin = AdminClient(cluster.client_config())
        admin.create_topics([NewTopic("load", 1, 1, config={"retention.bytes": str(8 * 2**20)}),
                             NewTopic(DEFAULT_OUTPUT_TOPIC, 1, 1, config={"cleanup.policy": "compact"})])
        time.sleep(3)
        pid = broker_java_pid(cluster)
        print(f"load average at start: {os.getloadavg()[0]:.1f}; broker pid {pid}", flush=True)
        print(f"before: {produce_mbeans(home, 1, cluster.root)} produce-quota MBeans, heap {heap_after_gc(pid):.1f} MB",
              flush=True)
        clients(cluster.bootstrap(), args.clients, stop)
        time.sleep(10)
        started = time.time()
        flapper(cluster.bootstrap(), DEFAULT_OUTPUT_TOPIC, stop, flips)
        rows = []
        while time.time() < started + args.minutes * 60:
            time.sleep(args.every)
            row = (time.time() - started, flips[0], produce_mbeans(home, 1, cluster.root), heap_after_gc(pid))
            rows.append(row)
            print(f"t={row[0]:.0f}s flips={row[1]} produce-quota MBeans={row[2]} heap after GC={row[3]:.1f} MB",
                  flush=True)
        log = (cluster.nodes[1].logs / "server.log").read_text(errors="replace")
        print(f"factor changes logged by the callback: {log.count('throttle factor of bench is now')}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        stop.set()
        time.sleep(2)
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
