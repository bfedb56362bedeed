"""Strimzi's kafka-quotas-plugin against this project on the same real 3-node Kafka cluster (KAFKA_HOME), same
producers and thresholds: the cut (fill -> the aggregate at its factor-0 level), what a stop admits, each client's
return after the free, and DescribeLogDirs requests per minute (broker JMX).

Each scenario starts a fresh cluster of three combined broker+controller nodes whose only log dir is a 64 MiB tmpfs
(root needed), a 3-partition topic with small segments and retention (so the load itself never fills a disk),
and N librdkafka producers (one process and client id each, 10 kB records, acks=1, as fast as they can). After a
warm-up, node 1's log dir is filled to 5 % free with a ballast file (min.available.ratio=0.10) for --stop-seconds,
then freed. Strimzi: `client.quota.callback.class=io.strimzi.kafka.quotas.StaticQuotaCallback`, its jar from
Maven Central (`mvn -q -f bench/strimzi dependency:copy`) or --strimzi-jar. This project: the callback jar
(`mvn -q -f broker-callback package -DskipTests`) and `quota-pipeline run` at PT1S publishing to the same cluster,
at each --mutes setting of quota.pipeline.throttle.max.mute. Both: produce quota 2 MB/s per broker, validity
PT20S, fallback 1.0.

    python3 bench/strimzi_compare.py --json bench/strimzi_compare.json --chart bench/strimzi_compare.png
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import realkafka as rk  # noqa: E402
from tests import realkafka_config as rc  # noqa: E402
from tests import realkafka_process as rp  # noqa: E402
from tests.realkafka_fleet import Client, start_librdkafka  # noqa: E402

STRIMZI_POM = ROOT / "bench" / "strimzi"
STRIMZI_JAR = STRIMZI_POM / "target" / "kafka-quotas-plugin.jar"
CALLBACK_MODULE = ROOT / "broker-callback"
STRIMZI_CLASS = "io.strimzi.kafka.quotas.StaticQuotaCallback"
PIPELINE_CLASS = "io.quotapipeline.callback.PipelineQuotaCallback"
P = "client.quota.callback.static."
PRODUCE = 2_000_000  # bytes/s per broker, shared by the clients (both plugins)
RATIO, FILL_TO = 0.10, 0.05  # min.available.ratio; node 1 is filled to 5 % free
TMPFS_MB = 64
TOPIC = "load"
SELF = "{self}"  # replaced by the node's own PLAINTEXT listener in its server.properties
JMX_BASE = int(os.environ.get("BENCH_JMX_BASE", "19990"))
# One MBean per request version (a `version` tag): the pattern takes them all.
DESCRIBE_LOG_DIRS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=DescribeLogDirs,*"


@dataclass
class Outcome:
    system: str  # "strimzi" or "quota-pipeline"
    setting: str  # storage.check-interval or throttle.max.mute
    clients: int
    pre_rate: float  # bytes/s acknowledged by all clients in the 10 s before the fill
    cut_s: float | None  # fill -> the first t from which 5 s admit at most max(2 x level, 5 % of pre_rate)
    cut5_s: float | None  # fill -> the first t from which 10 s admit at most 5 % of pre_rate (None: never)
    level: float  # the factor-0 level: bytes/s acknowledged from 30 s after the fill to the free
    admitted_share: float  # bytes acknowledged during the stop / (pre_rate x stop)
    admitted_rate: float  # bytes/s acknowledged during the stop, all brokers
    last20_share: float  # the same share over the stop's last 20 s
    model_rate: float | None  # this project: 1.25 x brokers x N x 1 MB / max mute (librdkafka's largest request)
    back_min_s: float | None  # free -> each client's first acknowledged record: fastest
    back_max_s: float | None  # ... slowest (None: a client not back within the wait)
    not_back: int
    describe_log_dirs_per_min: float  # all three nodes
    decision_seen_s: float | None  # this project: fill -> node 1 logs the 0.0


def _patch_cluster_start() -> None:
    """Lets overrides name the node's own listener ({self}) and gives each node its own JMX port."""
    original = rc.server_properties

    def with_self(node, voters, replication, tls, overrides):
        own = f"127.0.0.1:{node.ports[rc.PLAINTEXT]}"
        return original(node, voters, replication, tls, {k: v.replace(SELF, own) for k, v in overrides.items()})
    rc.server_properties = with_self
    env = rp.NodeProcess.env

    def with_jmx(self, jvm_opts=None):
        return {**env(self, jvm_opts), "JMX_PORT": str(JMX_BASE + self.layout.node_id)}
    rp.NodeProcess.env = with_jmx


def jmx_count(home: Path, node_id: int, root: Path) -> float:
    """The broker's DescribeLogDirs request count (JmxTool, Kafka's own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "CLASSPATH")}
    env.update(KAFKA_HEAP_OPTS="-Xmx64m", LOG_DIR=str(root / "jmxtool-logs"), KAFKA_JVM_PERFORMANCE_OPTS=rp.FAST_START_JVM)
    done = subprocess.run([str(home / "bin" / "kafka-run-class.sh"), "org.apache.kafka.tools.JmxTool", "--jmx-url",
                           f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{JMX_BASE + node_id}/jmxrmi", "--object-name",
                           DESCRIBE_LOG_DIRS, "--attributes", "Count", "--one-time", "true", "--report-format",
                           "properties"], env=env, capture_output=True, text=True, timeout=120)
    # No line at all when no such request came yet: the MBean appears with the first one.
    return sum(float(line.rsplit("=", 1)[1]) for line in done.stdout.splitlines() if ":Count=" in line)


class Ballast:
    """Holds a log dir at FILL_TO free with a ballast file: grows it as retention frees segments and shrinks it as
    the partitions grow, every 20 ms, so the dir stays below the limit without reaching ENOSPC (which would take
    the broker's only log dir offline). Retention can free several segments at once; at 0.2 s an observation once
    caught the dir above the limit (the 32-client run in bench/RESULTS.md)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "ballast"
        self.directory = directory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ballast")

    def _adjust(self) -> None:
        st = os.statvfs(self.directory)
        delta = st.f_bavail * st.f_frsize - int(FILL_TO * st.f_blocks * st.f_frsize)
        size = self.path.stat().st_size if self.path.exists() else 0
        if delta > 0:
            with open(self.path, "ab") as fh:
                fh.write(bytes(delta))
        elif delta < 0 and size > 0:
            os.truncate(self.path, max(0, size + delta))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._adjust()
            self._stop.wait(0.02)

    def start(self) -> None:
        self._adjust()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.path.unlink(missing_ok=True)


def common_overrides() -> dict[str, str]:
    return {P + "produce": str(PRODUCE), P + "storage.per.volume.limit.min.available.ratio": str(RATIO),
            P + "throttle.factor.validity.duration": "PT20S", P + "throttle.factor.fallback": "1.0",
            P + "kafka.admin.bootstrap.servers": SELF,
            "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "1000"}


def ensure_jar(path: Path, build: list[str], what: str) -> Path:
    if not path.exists():
        print(f"building {what}: {' '.join(build)}", flush=True)
        subprocess.run(build, check=True, timeout=900)
    return path


def callback_jar() -> Path:
    subprocess.run(["mvn", "-q", "-B", "-f", str(CALLBACK_MODULE), "package", "-DskipTests"], check=True, timeout=900)
    return next(j for j in (CALLBACK_MODULE / "target").glob("quota-pipeline-broker-callback-*.jar")
                if not j.name.endswith(("-sources.jar", "-javadoc.jar")))


def aggregate(clients: list[Client], start: float, end: float) -> float:
    return sum(c.between(start, end) for c in clients)


def run_scenario(system: str, setting: str, jar: Path, clients_n: int, stop_s: float, home: Path,
                 work: Path) -> Outcome:
    overrides = common_overrides()
    if system == "strimzi":
        overrides.update({"client.quota.callback.class": STRIMZI_CLASS, P + "storage.check-interval": setting})
    else:
        overrides.update({"client.quota.callback.class": PIPELINE_CLASS, "quota.pipeline.cluster.name": "bench",
                          "quota.pipeline.throttle.max.mute": setting})
    os.environ["CLASSPATH"] = str(jar)
    try:
        cluster = rk.start_cluster(rk.ClusterSpec(nodes=3, log_dirs=1, tmpfs_mb=TMPFS_MB, tmpfs_nodes=3,
                                                  overrides=overrides), home)
    finally:
        del os.environ["CLASSPATH"]
    job = watcher = None
    clients: list[Client] = []
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient(cluster.client_config())
        admin.create_topics([NewTopic(TOPIC, 3, 1, config={"retention.bytes": str(4 * 2**20),
                                                           "segment.bytes": str(2**20)})])[TOPIC].result(60)
        if system != "strimzi":
            job, watcher = start_pipeline(cluster, setting, work)
        clients = [start_librdkafka(cluster.bootstrap(), TOPIC, f"bench-{i}", int(stop_s) + 400, acks="1")
                   for i in range(clients_n)]
        deadline = time.time() + 120
        while time.time() < deadline and not all(c.acked and c.acked[-1] > 2_000_000 for c in clients):
            time.sleep(0.5)
        time.sleep(10)
        count0 = {n: jmx_count(home, n, cluster.root) for n in cluster.node_ids}
        t_count0 = time.time()
        pre_rate = aggregate(clients, time.time() - 10, time.time()) / 10
        keeper = Ballast(Path(cluster.log_dirs[1][-1]))
        filled = time.time()
        keeper.start()
        time.sleep(max(0.0, filled + stop_s - time.time()))
        keeper.stop()
        freed = time.time()
        wait_s = 75.0 if system != "strimzi" else 130.0  # Strimzi's silences end at librdkafka's socket timeout
        while time.time() < freed + wait_s and not all(c.first_ack_after(freed) for c in clients):
            time.sleep(0.5)
        count1 = {n: jmx_count(home, n, cluster.root) for n in cluster.node_ids}
        per_min = sum(count1[n] - count0[n] for n in count0) / (time.time() - t_count0) * 60
        return outcome(system, setting, clients, pre_rate, filled, freed, per_min, cluster)
    finally:
        for c in clients:
            c.stop()
        if job is not None:
            from tests.stream_job import stop_job
            stop_job(job)
        if watcher is not None:
            watcher.close()
        cluster.stop()


def start_pipeline(cluster, setting: str, work: Path):
    """`quota-pipeline run` at PT1S observing the cluster and publishing to it; waits for its first 1.0."""
    from tests.realkafka_props import write_properties
    from tests.stream_job import TopicWatcher, start_job
    props = {"client.quota.callback.static.kafka.admin.bootstrap.servers": cluster.bootstrap(),
             P + "storage.per.volume.limit.min.available.ratio": str(RATIO), P + "storage.check.interval": "PT1S",
             P + "throttle.factor.validity.duration": "PT20S", P + "throttle.factor.fallback": "1.0",
             P + "produce": str(PRODUCE), "quota.pipeline.cluster.name": "bench",
             "quota.pipeline.throttle.max.mute": setting,
             "quota.pipeline.checkpoint.path": str(work / f"checkpoint-{setting}-{time.time_ns()}")}
    conf = write_properties(work / f"bench-{setting}.properties", props)
    from quota_pipeline.core.properties import DEFAULT_OUTPUT_TOPIC  # the callbacks follow it too
    watcher = TopicWatcher(cluster.bootstrap(), DEFAULT_OUTPUT_TOPIC)
    job = start_job(conf, work / f"job-{setting}.log")
    watcher.wait_for(lambda r: r["throttle_factor"] == 1.0, timeout=300)
    return job, watcher


def _decision_seen(cluster, after: float) -> float | None:
    import re
    pattern = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\].*throttle factor of bench is now 0\.0 ")
    for line in (cluster.nodes[1].logs / "server.log").read_text(errors="replace").splitlines():
        found = pattern.match(line)
        if found:
            t = time.mktime(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")) + int(found.group(2)) / 1000
            if t >= after:
                return t - after
    return None


def outcome(system, setting, clients, pre_rate, filled, freed, per_min, cluster) -> Outcome:
    stop_s = freed - filled
    admitted = aggregate(clients, filled, freed)
    level = aggregate(clients, filled + 30, freed) / (freed - filled - 30)
    cut = _first(filled, freed, 5, lambda a, b: aggregate(clients, a, b) <= max(2 * level, 0.05 * pre_rate) * 5)
    cut5 = _first(filled, freed, 10, lambda a, b: aggregate(clients, a, b) <= 0.05 * pre_rate * 10)
    last20 = aggregate(clients, freed - 20, freed)
    backs = [c.first_ack_after(freed) for c in clients]
    back = [b - freed for b in backs if b is not None]
    model = None
    if system != "strimzi":
        model = 1.25 * len(cluster.node_ids) * len(clients) * 1_000_000 / float(setting[2:-1])
    return Outcome(system, setting, len(clients), pre_rate, cut, cut5, level, admitted / (pre_rate * stop_s),
                   admitted / stop_s, last20 / (pre_rate * 20), model, min(back, default=None),
                   max(back, default=None) if len(back) == len(clients) else None, len(clients) - len(back),
                   per_min, None if system == "strimzi" else _decision_seen(cluster, filled))


def _first(start: float, end: float, width: float, accept) -> float | None:
    """Seconds from `start` to the first window [t, t + width) (0.25 s steps) that `accept`s."""
    t = start
    while t + width <= end:
        if accept(t, t + width):
            return t - start
        t += 0.25
    return None


def table(outcomes: list[Outcome]) -> str:
    rows = ["| system | setting | clients | before (MB/s) | fill -> factor-0 level | fill -> <= 5 % | "
            "admitted during the stop | last 20 s | admitted (kB/s) | 1.25 x 3 x N x S / M (kB/s) | "
            "free -> each client back (s) | DescribeLogDirs / min |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        back = (f"{o.back_min_s:.1f}-{o.back_max_s:.1f}" if o.back_max_s is not None
                else f"{o.not_back} not back" if o.back_min_s is None else f"{o.back_min_s:.1f}-, {o.not_back} not back")
        rows.append(f"| {o.system} | {o.setting} | {o.clients} | {o.pre_rate / 1e6:.2f} | "
                    f"{'-' if o.cut_s is None else f'{o.cut_s:.1f} s'} | "
                    f"{'never' if o.cut5_s is None else f'{o.cut5_s:.1f} s'} | {o.admitted_share:.1%} | "
                    f"{o.last20_share:.1%} | {o.admitted_rate / 1e3:.0f} | "
                    f"{'-' if o.model_rate is None else f'{o.model_rate / 1e3:.0f}'} | {back} | "
                    f"{o.describe_log_dirs_per_min:.0f} |")
    return "\n".join(rows)


def chart(outcomes: list[Outcome], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, o in enumerate(outcomes):
        back = o.back_max_s if o.back_max_s is not None else (o.back_min_s or 0.0)
        marker = "s" if o.system == "strimzi" else "o"
        color = f"C{i}"
        label = f"{o.system} {o.setting}, {o.clients} clients" + ("" if o.back_max_s is not None
                                                                  else f" ({o.not_back} not back)")
        ax.scatter([back], [100 * o.admitted_share], marker=marker, s=70, color=color, label=label + ": whole stop")
        ax.scatter([back], [100 * o.last20_share], marker=marker, s=70, facecolors="none", edgecolors=color,
                   label=label + ": its last 20 s")
        ax.plot([back, back], [100 * o.admitted_share, 100 * o.last20_share], color=color, alpha=0.4)
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.set_xlabel("free -> slowest client's first acknowledged record (s)")
    ax.set_ylabel("admitted at factor 0 (% of the earlier rate)")
    ax.set_title("Factor 0: what a stop admits against how fast clients return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strimzi-jar", type=Path, help=f"a Strimzi plugin jar (default: {STRIMZI_JAR}, fetched "
                        "from Maven Central with mvn -f bench/strimzi dependency:copy)")
    parser.add_argument("--strimzi-interval", default="2", help="Strimzi's storage.check-interval, seconds (2)")
    parser.add_argument("--mutes", default="PT32S,PT60S", help="this project's throttle.max.mute settings")
    parser.add_argument("--clients", default="8", help="librdkafka client counts, comma-separated (8)")
    parser.add_argument("--stop-seconds", type=float, default=180.0, help="how long node 1 stays full (180)")
    parser.add_argument("--systems", default="strimzi,quota-pipeline")
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    parser.add_argument("--chart", type=Path, help="write the chart (PNG) here")
    parser.add_argument("--from-json", type=Path, help="print the table and draw the chart of an earlier run")
    args = parser.parse_args(argv)
    if args.from_json:
        earlier = [Outcome(**d) for d in json.loads(args.from_json.read_text())]
        print(table(earlier))
        if args.chart:
            chart(earlier, args.chart)
        return 0
    try:
        home = rk.kafka_home()
    except rk.KafkaUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _patch_cluster_start()
    systems = args.systems.split(",")
    strimzi = args.strimzi_jar or ensure_jar(STRIMZI_JAR, ["mvn", "-q", "-B", "-f", str(STRIMZI_POM),
                                                           "dependency:copy"], "Strimzi's plugin")
    ours = callback_jar() if "quota-pipeline" in systems else None
    work = Path(tempfile.mkdtemp(prefix="strimzi-compare-"))
    outcomes: list[Outcome] = []
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for n in [int(x) for x in args.clients.split(",")]:
        runs = ([("strimzi", args.strimzi_interval, strimzi)] if "strimzi" in systems else []) + \
               ([("quota-pipeline", m, ours) for m in args.mutes.split(",")] if ours else [])
        for system, setting, jar in runs:
            started = time.time()
            o = run_scenario(system, setting, jar, n, args.stop_seconds, home, work)
            outcomes.append(o)
            print(json.dumps(asdict(o)), f"({time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f})",
                  flush=True)
            if args.json:
                args.json.write_text(json.dumps([asdict(x) for x in outcomes], indent=1))
    print(table(outcomes))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.chart:
        chart(outcomes, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
