"""Strimzi's kafka-quotas-plugin against this project on the same real 3-node Kafka cluster (KAFKA_HOME), same
producers and thresholds: the cut (fill -> the aggregate at its factor-0 level), what a stop admits, each client's
return after the free, whether a throttle holds while the full broker is stopped or its log dir is offline, and
DescribeLogDirs requests per minute (broker JMX).

Each run starts a fresh cluster of three combined broker+controller nodes whose log dir is a 64 MiB tmpfs (root
needed), a 3-partition topic (one partition per node, replication 1) with small segments and retention (so the load
itself never fills a disk), and N producers with their own client ids, each in its own process (the small
applications 8 to a process, each its own producer instance): librdkafka
(--clients: 10 kB records, acks=1, as fast as they can) or Java (--java-clients: harness/ThrottleProducer.java, default
producer settings, 10 kB records). After a warm-up, node 1's log dir is filled to 5 % free with a ballast file
(min.available.ratio=0.10); --stop-seconds after the fill it is freed. Scenarios (--scenarios):

  fill     node 1 stays at 5 % free for the whole stop, then is freed.
  stop     as fill until the throttle is in force (the producers' last 5 s at most 25 % of their earlier rate), then
           node 1 is stopped cleanly (SIGTERM) while full for the rest of the stop; then freed and started again.
  offline  as fill until the throttle is in force, then node 1's tmpfs is filled to ENOSPC so Kafka takes that log
           dir offline (each node also has a disk log dir, so the broker keeps running); it stays so for the rest of
           the stop; then freed and node 1 restarted (a clean stop and start) as an operator would.

  targeted as fill, with a second topic (spare) on nodes 2 and 3 only, written by half the clients: a targeted
           refusing stop refuses the load topic (a replica on node 1's full dir) and keeps the spare one producing.
           It runs for the refuse system only (a quota throttles every topic), with the first client set only.

Loads: --clients (librdkafka at full speed), --java-clients, --small-apps (librdkafka, 1 kB records, 8 kB/s each,
acks=all: applications below any per-client stop limit). Every producer behaves as an application that loses no
record: a refused record is kept and sent again (one every 0.25 s while refused, all once one is acknowledged).

Systems (--systems): strimzi (its plugin), quota-pipeline (this project's quota throttle at each --mutes) and refuse
(this project's refusing stop: the StopAuthorizer over Kafka's StandardAuthorizer beside the callback, at each
--scopes). For refuse the outcome also gives the acceptance figures from each node's own log lines: fill -> every
node refusing, the share acknowledged from 1 s after that to the release at the brokers, and the slowest client's
first acknowledged record after the release.

For stop and offline, the outcome says whether the throttle was released while the condition held: the aggregate
rate per 5 s from the condition to the free, and the first 5 s in which the producers were back at >= 50 % of their
earlier rate (node 1's partition is unavailable then, so the others carry the load; librdkafka's partitioner still
puts some records on it, which wait in its queue). Strimzi: `client.quota.callback.class=
io.strimzi.kafka.quotas.StaticQuotaCallback`, its jar from Maven Central (`mvn -q -f bench/strimzi dependency:copy`)
or --strimzi-jar. This project: the callback jar (`mvn -q -f broker-callback package -DskipTests`) and
`quota-pipeline run` at PT1S publishing to the same cluster, at each --mutes setting of
quota.pipeline.throttle.max.mute. Both: produce quota 2 MB/s per broker, validity PT20S, fallback 1.0. Every
combination of scenario, client set and system runs on its own cluster, one after another.

    python3 -m bench.strimzi_compare --json bench/results/strimzi_compare.json --chart bench/results/strimzi_compare.png
    python3 -m bench.strimzi_compare --java-clients 8 --scenarios fill,stop,offline
"""
from __future__ import annotations

import argparse
import errno
import json
import re
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import kafka as rk
from harness.callback_jar import callback_jar
from harness import kafka_config as rc
from harness import kafka_process as rp
from harness.producers import Client, compile_java, start_java, start_librdkafka, start_librdkafka_group
from harness.kafka_stall import fill

ROOT = Path(__file__).resolve().parent.parent

STRIMZI_POM = ROOT / "bench" / "strimzi"
STRIMZI_JAR = STRIMZI_POM / "target" / "kafka-quotas-plugin.jar"
STRIMZI_CLASS = "io.strimzi.kafka.quotas.StaticQuotaCallback"
PIPELINE_CLASS = "io.quotapipeline.callback.PipelineQuotaCallback"
P = "client.quota.callback.static."
PIPELINE_PRINCIPAL = f"User:{rk.SCRAM_USER}"  # the job's output principal (SCRAM), never throttled
PRODUCE = 2_000_000  # bytes/s per broker, shared by the clients (both plugins)
RATIO, FILL_TO = 0.10, 0.05  # min.available.ratio; node 1 is filled to 5 % free
TMPFS_MB = 64
TOPIC = "load"
SELF = "{self}"  # replaced by the node's own PLAINTEXT listener in its server.properties
JMX_BASE = int(os.environ.get("BENCH_JMX_BASE", "19990"))
# One MBean per request version (a `version` tag): the pattern takes them all.
DESCRIBE_LOG_DIRS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=DescribeLogDirs,*"
SCENARIOS = ("fill", "stop", "offline", "targeted")
KINDS = ("librdkafka", "java", "small")
SPARE = "spare"  # targeted: a topic with no replica on node 1, written by half the clients
SMALL_RECORD, SMALL_RATE = 1_000, 8_000  # a small application: 1 kB records, 8 kB/s, acks=all
# 64 Python processes took the CPU the brokers and the job needed (the decision's latency doubled); a producer
# instance per application keeps what the brokers see (a client id and connections each).
SMALL_PER_PROCESS = 8
# --job-priority: added to the job's niceness and its sessions'. The brokers, the job and the producers share 2 cores
# here; deployed, the job runs on a host of its own (a Spark cluster or pod), which the default stands for.
JOB_PRIORITY = [-5]
REFUSE_CLASS = "io.quotapipeline.callback.StopAuthorizer"
# The largest request a client sends to one broker: librdkafka fills ~1 MB requests; the Java client sends one
# batch.size (16 KiB) batch per partition, and the topic has one partition per broker.
REQUEST_BYTES = {"librdkafka": 1_000_000, "java": 16_384, "small": 1_000}
THROTTLED_SHARE = 0.25  # the producers' last 5 s at most this share of their earlier rate: the throttle is in force
RELEASED_SHARE = 0.50  # a 5 s window at this share or more while the condition holds: the throttle was released
# Kafka's lines when a write to a log dir failed and the broker stopped serving its replicas.
OFFLINE_LINE = re.compile(r"LogDirFailureChannel|Stopped serving replicas in dir")


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
    # Added with the client kinds and scenarios; the defaults read outcomes of earlier runs (--from-json).
    kind: str = "librdkafka"
    scenario: str = "fill"
    throttled_s: float | None = None  # stop/offline: fill -> the last 5 s first at <= 25 % (None: not in 60 s)
    condition_s: float | None = None  # fill -> node 1 stopped / its log dir offline (None: not seen)
    released_s: float | None = None  # condition -> the first 5 s at >= 50 % of the earlier rate (None: held)
    held_share: float | None = None  # acknowledged from the condition to the free / (pre_rate x that time)
    peak_share: float | None = None  # the highest 5 s (0.25 s steps) in that time / pre_rate
    held_rates: list[float] = field(default_factory=list)  # bytes/s per 5 s from the condition to the free
    restarted_s: float | None = None  # free -> node 1 answers again (stop/offline)
    # condition -> node 2's callback logged a factor above 0 (None: it stayed 0 until the free): the release as the
    # brokers apply it, whether or not a producer could use it (a Java client honours a long throttle time itself)
    factor_raised_s: float | None = None
    factor_read: bool = False  # node 2's log was read for it (outcomes of earlier runs: not)
    # The refusing stop (system "refuse"), from the nodes' own log lines: fill -> every node refuses; the share of the
    # earlier rate acknowledged from 1 s after that to the release at the brokers; free -> every node released;
    # that release -> the slowest client's first acknowledged record.
    stop_at_brokers_s: float | None = None
    admitted_after_stop_share: float | None = None
    release_at_brokers_s: float | None = None
    back_from_release_max_s: float | None = None
    spare_share: float | None = None  # targeted: the spare topic's rate through the stop / its earlier rate


@dataclass
class Marks:
    """The moments of one scenario (wall-clock seconds) its outcome is computed from."""

    filled: float
    freed: float
    throttled: float | None = None
    condition: float | None = None
    restarted: float | None = None


def patch_cluster_start() -> None:
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
        self.path = directory / "ballast-keeper"  # `fill` writes "ballast-N" files beside it (offline)
        self.directory = directory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ballast")

    def _adjust(self) -> None:
        st = os.statvfs(self.directory)
        delta = st.f_bavail * st.f_frsize - int(FILL_TO * st.f_blocks * st.f_frsize)
        size = self.path.stat().st_size if self.path.exists() else 0
        if delta > 0:
            try:
                with open(self.path, "ab") as fh:
                    fh.write(bytes(delta))
            except OSError as exc:  # the partitions grew meanwhile: what fitted stays, the next tick trims it
                if exc.errno != errno.ENOSPC:
                    raise
        elif delta < 0 and size > 0:
            os.truncate(self.path, max(0, size + delta))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._adjust()
            self._stop.wait(0.02)

    def start(self) -> None:
        self._adjust()
        self._thread.start()

    def pause(self) -> None:
        """Stop adjusting; the file stays."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def stop(self) -> None:
        """Stop adjusting and delete every ballast file in the dir (the keeper's and `fill`'s)."""
        self.pause()
        for path in self.directory.glob("ballast*"):
            path.unlink(missing_ok=True)


def common_overrides() -> dict[str, str]:
    return {P + "produce": str(PRODUCE), P + "storage.per.volume.limit.min.available.ratio": str(RATIO),
            P + "throttle.factor.validity.duration": "PT20S", P + "throttle.factor.fallback": "1.0",
            P + "kafka.admin.bootstrap.servers": SELF,
            "log.retention.check.interval.ms": "1000", "log.segment.delete.delay.ms": "1000",
            # Kafka's first retention pass waits 30 s after a start by default: eight clients' first burst (each a
            # fresh quota sensor) filled a 64 MiB tmpfs before it, and that node halted.
            "log.initial.task.delay.ms": "1000",
            # The decision topic lives on this cluster, one replica on node 1, whose tmpfs fails in `offline`: an
            # acks=all decision then waits up to max(request timeout x ceil(lag / timeout), 1.5 x lag) + 2 s, 47 s
            # at Kafka's defaults, and PT20S would expire meanwhile (the job warns of it at start; the first 8-client
            # offline run released for ~20 s so). A lag of 8 s and the publisher's request timeout below keep it
            # at 14 s.
            "replica.lag.time.max.ms": "8000"}


def ensure_jar(path: Path, build: list[str], what: str) -> Path:
    if not path.exists():
        print(f"building {what}: {' '.join(build)}", flush=True)
        subprocess.run(build, check=True, timeout=900)
    return path


def aggregate(clients: list[Client], start: float, end: float) -> float:
    return sum(c.between(start, end) for c in clients)


class DescribeCounts:
    """Each node's DescribeLogDirs count (JMX) at the start and at its last sample: a node sampled before it stops
    or restarts (its count starts again from 0) keeps the rate of the time it ran."""

    def __init__(self, home: Path, cluster: Any) -> None:
        self.home, self.cluster = home, cluster
        self.first = {n: (time.time(), jmx_count(home, n, cluster.root)) for n in cluster.node_ids}
        self.last: dict[int, tuple[float, float]] = {}

    def sample(self, node_id: int) -> None:
        self.last[node_id] = (time.time(), jmx_count(self.home, node_id, self.cluster.root))

    def per_minute(self) -> float:
        for n in self.first:
            if n not in self.last:
                self.sample(n)
        return sum((self.last[n][1] - c0) / (self.last[n][0] - t0) * 60 for n, (t0, c0) in self.first.items())


def start_clients(kind: str, n: int, cluster: Any, home: Path, classes: Path | None, seconds: int,
                  targeted: bool = False) -> list[Client]:
    """`n` producers of `kind`; `targeted`: the odd ones write the spare topic (client ids ...-spare-i)."""
    def topic(i: int) -> str:
        return SPARE if targeted and i % 2 else TOPIC

    def name(prefix: str, i: int) -> str:
        return f"{prefix}-{'spare-' if topic(i) == SPARE else ''}{i}"
    if kind == "java":
        return [start_java(home, classes, cluster.bootstrap(), topic(i), name("bench-java", i), seconds)
                for i in range(n)]
    if kind == "small":  # SMALL_PER_PROCESS producers (each its own client) per process, per topic
        out: list[Client] = []
        for t in sorted({topic(i) for i in range(n)}):
            ids = [name("bench-app", i) for i in range(n) if topic(i) == t]
            for k in range(0, len(ids), SMALL_PER_PROCESS):
                out += start_librdkafka_group(cluster.bootstrap(), t, ids[k:k + SMALL_PER_PROCESS], seconds,
                                              acks="all", record_bytes=SMALL_RECORD, rate=SMALL_RATE)
        return out
    return [start_librdkafka(cluster.bootstrap(), topic(i), name("bench", i), seconds, acks="1") for i in range(n)]


def system_overrides(system: str, setting: str, window_num: int = 11) -> dict[str, str]:
    """The brokers' settings for one system: strimzi at its check interval, quota-pipeline at its max mute, refuse
    at its stop scope."""
    overrides = {**common_overrides(), "quota.window.num": str(window_num)}
    if system != "strimzi":
        overrides[P + "excluded.principal.name.list"] = PIPELINE_PRINCIPAL
    if system == "strimzi":
        overrides.update({"client.quota.callback.class": STRIMZI_CLASS, P + "storage.check-interval": setting})
    elif system == "refuse":
        # Both plugins, as deployed for the refusing stop: the authorizer refuses writes at factor 0 (delegating
        # everything else to Kafka's StandardAuthorizer, open as a cluster without ACLs is), the callback grades.
        # The controllers authorize each other's votes before the ACLs have loaded, which StandardAuthorizer allows
        # super users only: on PLAINTEXT listeners every node is User:ANONYMOUS (a stop refuses super users too).
        overrides.update({"client.quota.callback.class": PIPELINE_CLASS, "quota.pipeline.cluster.name": "bench",
                          "authorizer.class.name": REFUSE_CLASS, "allow.everyone.if.no.acl.found": "true",
                          "super.users": "User:ANONYMOUS", "quota.pipeline.stop.scope": setting})
    else:
        overrides.update({"client.quota.callback.class": PIPELINE_CLASS, "quota.pipeline.cluster.name": "bench",
                          "quota.pipeline.throttle.max.mute": setting})
    return overrides


def run_scenario(system: str, setting: str, jar: Path, kind: str, clients_n: int, scenario: str, stop_s: float,
                 home: Path, work: Path, classes: Path | None = None, window_num: int = 11) -> Outcome:
    overrides = system_overrides(system, setting, window_num)
    # offline: a disk log dir beside the tmpfs keeps node 1 running when the tmpfs fails (Kafka halts a broker
    # whose every log dir is offline).
    log_dirs = 2 if scenario == "offline" else 1
    with plugin_on_classpath(jar):
        cluster = rk.start_cluster(rk.ClusterSpec(nodes=3, log_dirs=log_dirs, tmpfs_mb=TMPFS_MB, tmpfs_nodes=3,
                                                  overrides=overrides), home)
    job = watcher = None
    clients: list[Client] = []
    try:
        create_topic(cluster, spare=scenario == "targeted")
        if system != "strimzi":
            job, watcher = start_pipeline(cluster, "PT60S" if system == "refuse" else setting, work, window_num)
        clients = start_clients(kind, clients_n, cluster, home, classes, int(stop_s) + 400, scenario == "targeted")
        deadline = time.time() + 120
        warm = 100_000 if kind == "small" else 2_000_000
        while time.time() < deadline and not all(c.acked and c.acked[-1] > warm for c in clients):
            time.sleep(0.5)
        time.sleep(10)
        counts = DescribeCounts(home, cluster)
        pre_rate = aggregate(clients, time.time() - 10, time.time()) / 10
        with plugin_on_classpath(jar):  # node 1 starts again in stop and offline; nothing else started reads it
            marks = hold(scenario, cluster, clients, pre_rate, stop_s, counts)
        wait_s = return_wait(system)
        while time.time() < marks.freed + wait_s and not all(c.first_ack_after(marks.freed) for c in clients):
            time.sleep(0.5)
        time.sleep(2)  # the last node's release line and the acknowledgements after it
        return outcome(system, setting, kind, scenario, clients, pre_rate, marks, counts.per_minute(), cluster)
    finally:
        for c in clients:
            c.stop()
        if job is not None:
            from harness.stream_job import stop_job
            stop_job(job)
        if watcher is not None:
            watcher.close()
        keep_logs(cluster, work / f"{system}-{setting}-{kind}{clients_n}-{scenario}-{time.strftime('%H%M%S')}")
        cluster.stop()


def keep_logs(cluster: Any, into: Path) -> None:
    """Each node's server.log (rolled files included) beside the job's log, for a look after the run."""
    import shutil
    for n in cluster.node_ids:
        for path in cluster.nodes[n].logs.glob("server.log*"):
            (into / f"node{n}").mkdir(parents=True, exist_ok=True)
            shutil.copy(path, into / f"node{n}" / path.name)


def return_wait(system: str) -> float:
    """How long after the free the bench waits for every client's first acknowledged record."""
    return 75.0 if system != "strimzi" else 130.0  # Strimzi's silences end at librdkafka's socket timeout


@contextmanager
def plugin_on_classpath(jar: Path):
    """The plugin jar on CLASSPATH for the nodes started meanwhile (kafka-run-class.sh adds it to theirs)."""
    os.environ["CLASSPATH"] = str(jar)
    try:
        yield
    finally:
        del os.environ["CLASSPATH"]


def create_topic(cluster: Any, spare: bool = False) -> None:
    """The load topic, one partition per node; with two log dirs, node 1's partition moved onto its tmpfs. `spare`:
    also the spare topic, on nodes 2 and 3 only."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(cluster.client_config())
    small = {"retention.bytes": str(4 * 2**20), "segment.bytes": str(2**20)}
    topics = [NewTopic(TOPIC, 3, replica_assignment=[[1], [2], [3]], config=small)]
    if spare:
        topics.append(NewTopic(SPARE, 2, replica_assignment=[[2], [3]], config=small))
    for future in admin.create_topics(topics).values():
        future.result(60)
    if len(cluster.log_dirs[1]) == 1:
        return
    from harness.kafka_props import wait_for
    target = cluster.log_dirs[1][-1]

    def placed() -> bool:
        if os.path.isdir(os.path.join(target, f"{TOPIC}-0")):  # not "-future": the move is done
            return True
        rk.with_admin(cluster, lambda a: a.alter_replica_log_dirs({(TOPIC, 0, 1): target}))
        return False
    wait_for(placed, 60, f"node 1's partition of {TOPIC} is on its tmpfs {target}", every=0.5)


def hold(scenario: str, cluster: Any, clients: list[Client], pre_rate: float, stop_s: float,
         counts: DescribeCounts) -> Marks:
    """Fill node 1's tmpfs to 5 % free, bring about the scenario's condition, free it `stop_s` after the fill and
    (stop, offline) start node 1 again."""
    tmpfs = Path(cluster.log_dirs[1][-1])
    keeper = Ballast(tmpfs)
    marks = Marks(filled=time.time(), freed=0.0)
    keeper.start()
    end = marks.filled + stop_s
    _progress(f"{scenario}: node 1 filled to {FILL_TO:.0%} free, earlier rate {pre_rate / 1e6:.2f} MB/s")
    if scenario in ("stop", "offline"):
        marks.throttled = wait_throttled(clients, pre_rate, marks.filled, marks.filled + min(60.0, stop_s / 2))
        _progress(f"throttled: {_since(marks.throttled, marks.filled)}")
        if scenario == "stop":
            counts.sample(1)  # before its count starts again from 0
            cluster.stop_node(1)
            marks.condition = time.time()
        else:
            keeper.pause()
            marks.condition = take_offline(cluster, tmpfs, end)
        _progress(f"node 1 {'stopped' if scenario == 'stop' else 'log dir offline'}: "
                  f"{_since(marks.condition, marks.filled)}")
    time.sleep(max(0.0, end - time.time()))
    keeper.stop()
    marks.freed = time.time()
    _progress("freed")
    if scenario == "offline":
        counts.sample(1)
        cluster.stop_node(1)  # Kafka brings an offline log dir back only at a start
    if scenario in ("stop", "offline"):
        cluster.start_node(1)
        marks.restarted = time.time()
        _progress(f"node 1 started again: {_since(marks.restarted, marks.freed)} after the free")
    return marks


def _progress(text: str) -> None:
    print(time.strftime("%H:%M:%S"), text, flush=True)


def _since(t: float | None, start: float) -> str:
    return "not seen" if t is None else f"{t - start:.1f} s"


def wait_throttled(clients: list[Client], pre_rate: float, filled: float, deadline: float) -> float | None:
    """When the producers' last 5 s after the fill first admitted at most THROTTLED_SHARE of their earlier rate."""
    while time.time() < deadline:
        now = time.time()
        if now - filled >= 5 and aggregate(clients, now - 5, now) <= THROTTLED_SHARE * pre_rate * 5:
            return now
        time.sleep(0.5)
    return None


def take_offline(cluster: Any, directory: Path, deadline: float) -> float | None:
    """Fill `directory` to ENOSPC, again whenever retention freed room, until node 1 logs that it failed; when."""
    started = time.time()
    for attempt in range(10**6):
        fill(str(directory), f"ballast-{attempt}")
        seen = _log_time(cluster, 1, OFFLINE_LINE, started)
        if seen is not None or time.time() >= deadline:
            return seen
        time.sleep(0.5)
    return None


def start_pipeline(cluster, setting: str, work: Path, window_num: int = 11):
    """`quota-pipeline run` at PT1S observing the cluster and publishing to it; waits for its first 1.0."""
    from harness.kafka_props import write_properties
    from harness.stream_job import TopicWatcher, start_job
    from harness.kafka_props import client_properties, prefixed
    # The job publishes as its own principal, which the brokers exclude from the quota (PIPELINE_PRINCIPAL): sharing
    # the broker-wide produce quota with the producers, its decisions waited out their throttle (3-5 s per record).
    cluster.create_scram_user()
    props = {**prefixed("quota.pipeline.output.kafka.", client_properties(cluster, rc.SASL)),
             "client.quota.callback.static.kafka.admin.bootstrap.servers": cluster.bootstrap(),
             P + "storage.per.volume.limit.min.available.ratio": str(RATIO), P + "storage.check.interval": "PT1S",
             P + "throttle.factor.validity.duration": "PT20S", P + "throttle.factor.fallback": "1.0",
             P + "produce": str(PRODUCE), "quota.pipeline.cluster.name": "bench",
             "quota.pipeline.throttle.max.mute": setting, "quota.pipeline.output.kafka.request.timeout.ms": "8000",
             "quota.window.num": str(window_num),  # the brokers' own: the job checks the max mute against it
             "quota.pipeline.checkpoint.path": str(work / f"checkpoint-{setting}-{time.time_ns()}")}
    conf = write_properties(work / f"bench-{setting}.properties", props)
    from quota_pipeline.core.properties import DEFAULT_OUTPUT_TOPIC  # the callbacks follow it too
    watcher = TopicWatcher(cluster.bootstrap(), DEFAULT_OUTPUT_TOPIC)
    job = start_job(conf, work / f"job-{setting}.log", log_batches=True, priority=JOB_PRIORITY[0])
    watcher.wait_for(lambda r: r["throttle_factor"] == 1.0, timeout=300)
    return job, watcher


DECISION_LINE = re.compile(r"throttle factor of bench is now 0\.0 ")
# The plugins' line when a record that changes the factor reaches the node (its follower thread applies it; the
# authorizer refuses from then on): the decision at the broker, for the stop (0.0) and the release (1.0).
REFUSE_LINE = re.compile(r"decision of bench observed at \S+: throttle factor 0\.0 ")
RELEASE_LINE = re.compile(r"decision of bench observed at \S+: throttle factor 1\.0 ")


# The factor each system's callback logs when it changes: Strimzi "Throttle Factor changed from ThrottleFactor{...}
# to ThrottleFactor{throttleFactor=1.0, ...}", this project "throttle factor of bench is now 1.0 (...)".
FACTOR_LINE = re.compile(r"Throttle Factor changed from .* to ThrottleFactor\{throttleFactor=([0-9.Ee-]+)"
                         r"|throttle factor of bench is now ([0-9.Ee-]+) ")


def _log_time(cluster: Any, node_id: int, pattern: re.Pattern, after: float) -> float | None:
    """Wall time of the first line of the node's server.log at or after `after` that matches `pattern`."""
    return next((t for t, _ in rp.log_lines(cluster.nodes[node_id].logs, pattern, after)), None)


def factor_raised(cluster: Any, node_id: int, after: float) -> float | None:
    """When the node's callback (either system) first logged a factor above 0 at or after `after`."""
    return next((t for t, m in rp.log_lines(cluster.nodes[node_id].logs, FACTOR_LINE, after)
                 if float(m.group(1) or m.group(2)) > 0), None)


def held_window(clients: list[Client], pre_rate: float, start: float, end: float
                ) -> tuple[list[float], float | None, float, float]:
    """From `start` (the condition) to `end` (the free): the aggregate bytes/s per 5 s, the offset of the first
    5 s window (0.25 s steps) at >= RELEASED_SHARE of the earlier rate (None: held), the highest such window and the
    whole time's share of the earlier rate."""
    rates = [aggregate(clients, t, min(t + 5, end)) / (min(t + 5, end) - t)
             for t in (start + 5 * i for i in range(int((end - start) // 5)))]
    released = _first(start, end, 5, lambda a, b: aggregate(clients, a, b) >= RELEASED_SHARE * pre_rate * 5)
    peak = max((aggregate(clients, start + 0.25 * i, start + 0.25 * i + 5) / 5
                for i in range(int(max(0.0, end - start - 5) // 0.25) + 1)), default=0.0)
    whole = aggregate(clients, start, end) / (end - start) if end > start else 0.0
    return rates, released, peak / pre_rate, whole / pre_rate


def outcome(system: str, setting: str, kind: str, scenario: str, clients: list[Client], pre_rate: float,
            marks: Marks, per_min: float, cluster: Any) -> Outcome:
    filled, freed = marks.filled, marks.freed
    stop_s = freed - filled
    admitted = aggregate(clients, filled, freed)
    settled = filled + min(30.0, stop_s / 2)  # the factor-0 level from 30 s after the fill (half a short stop)
    level = aggregate(clients, settled, freed) / (freed - settled)
    cut = _first(filled, freed, 5, lambda a, b: aggregate(clients, a, b) <= max(2 * level, 0.05 * pre_rate) * 5)
    cut5 = _first(filled, freed, 10, lambda a, b: aggregate(clients, a, b) <= 0.05 * pre_rate * 10)
    last20 = aggregate(clients, freed - 20, freed)
    backs = [c.first_ack_after(freed) for c in clients]
    back = [b - freed for b in backs if b is not None]
    model = None
    if system == "quota-pipeline":
        model = 1.25 * len(cluster.node_ids) * len(clients) * REQUEST_BYTES[kind] / float(setting[2:-1])
    seen = None if system == "strimzi" else _log_time(cluster, 1, DECISION_LINE, filled)
    o = Outcome(system, setting, len(clients), pre_rate, cut, cut5, level, admitted / (pre_rate * stop_s),
                admitted / stop_s, last20 / (pre_rate * 20), model, min(back, default=None),
                max(back, default=None) if len(back) == len(clients) else None, len(clients) - len(back),
                per_min, None if seen is None else seen - filled, kind=kind, scenario=scenario)
    if system == "refuse":
        refusing_stop(o, clients, cluster, pre_rate, filled, freed)
    if scenario == "targeted":
        spare = [c for c in clients if "-spare-" in c.client_id]
        spare_pre = aggregate(spare, filled - 10, filled) / 10
        start = filled + (o.stop_at_brokers_s or o.decision_seen_s or 0.0) + 1.0
        o.spare_share = aggregate(spare, start, freed) / (freed - start) / spare_pre if spare_pre else None
    if marks.throttled is not None:
        o.throttled_s = marks.throttled - filled
    if marks.restarted is not None:
        o.restarted_s = marks.restarted - freed
    if marks.condition is not None:
        o.condition_s = marks.condition - filled
        o.held_rates, o.released_s, o.peak_share, o.held_share = held_window(clients, pre_rate, marks.condition,
                                                                              freed)
        raised = factor_raised(cluster, 2, marks.condition)  # node 2 runs throughout
        o.factor_raised_s = None if raised is None or raised > freed else raised - marks.condition
        o.factor_read = True
    return o


def refusing_stop(o: Outcome, clients: list[Client], cluster: Any, pre_rate: float, filled: float,
                  freed: float) -> None:
    """The refusing stop's figures from each node's authorizer lines: when the last node began refusing, what was
    acknowledged from 1 s after that until the last node's release, and each client's return from that release.
    Targeted runs count the clients of the load topic only (the spare topic is not stopped)."""
    stopped = [_log_time(cluster, n, REFUSE_LINE, filled) for n in cluster.node_ids]
    released = [_log_time(cluster, n, RELEASE_LINE, freed - 1.0) for n in cluster.node_ids]
    stopped_clients = [c for c in clients if "-spare-" not in c.client_id]
    pre = pre_rate * len(stopped_clients) / len(clients)
    if None not in stopped:
        o.stop_at_brokers_s = max(stopped) - filled
        end = min(r for r in released if r is not None) if any(r is not None for r in released) else freed
        start = max(stopped) + 1.0
        o.admitted_after_stop_share = aggregate(stopped_clients, start, end) / (pre * (end - start))
    if None not in released:
        release = min(released)  # a client back before the last node released counts from the first
        o.release_at_brokers_s = max(released) - freed
        backs = [c.first_ack_after(release) for c in stopped_clients]
        o.back_from_release_max_s = None if None in backs else max(backs) - release


def _first(start: float, end: float, width: float, accept) -> float | None:
    """Seconds from `start` to the first window [t, t + width) (0.25 s steps) that `accept`s."""
    t = start
    while t + width <= end:
        if accept(t, t + width):
            return t - start
        t += 0.25
    return None


def _s(value: float | None, none: str = "-") -> str:
    return none if value is None else f"{value:.1f} s"


def table(outcomes: list[Outcome]) -> str:
    rows = ["| scenario | system | setting | clients | before (MB/s) | fill -> factor-0 level | fill -> <= 5 % | "
            "admitted during the stop | last 20 s | admitted (kB/s) | 1.25 x 3 x N x S / M (kB/s) | "
            "free -> each client back (s) | DescribeLogDirs / min |", "|---" * 13 + "|"]
    for o in outcomes:
        back = (f"{o.back_min_s:.1f}-{o.back_max_s:.1f}" if o.back_max_s is not None
                else f"{o.not_back} not back" if o.back_min_s is None else f"{o.back_min_s:.1f}-, {o.not_back} not back")
        rows.append(f"| {o.scenario} | {o.system} | {o.setting} | {o.clients} {o.kind} | {o.pre_rate / 1e6:.2f} | "
                    f"{_s(o.cut_s)} | {_s(o.cut5_s, 'never')} | {o.admitted_share:.1%} | "
                    f"{o.last20_share:.1%} | {o.admitted_rate / 1e3:.0f} | "
                    f"{'-' if o.model_rate is None else f'{o.model_rate / 1e3:.0f}'} | {back} | "
                    f"{o.describe_log_dirs_per_min:.0f} |")
    return "\n".join(rows)


def held_table(outcomes: list[Outcome]) -> str:
    """The stop and offline rows: was the throttle released while node 1 was stopped / its log dir offline?"""
    rows = ["| scenario | system | setting | clients | fill -> throttled (<= 25 %) | fill -> stopped / offline | "
            "factor > 0 on node 2 while so | producers released while so (>= 50 % for 5 s) | admitted while so | "
            "highest 5 s | free -> node 1 back |", "|---" * 11 + "|"]
    for o in outcomes:
        if o.scenario not in ("stop", "offline"):
            continue
        held = ("-" if o.condition_s is None else "held" if o.released_s is None
                else f"after {o.released_s:.1f} s")
        factor = ("-" if o.condition_s is None or not o.factor_read else "held" if o.factor_raised_s is None
                  else f"after {o.factor_raised_s:.1f} s")
        rows.append(f"| {o.scenario} | {o.system} | {o.setting} | {o.clients} {o.kind} | "
                    f"{_s(o.throttled_s, 'not in 60 s')} | {_s(o.condition_s, 'not seen')} | {factor} | {held} | "
                    f"{'-' if o.held_share is None else f'{o.held_share:.1%}'} | "
                    f"{'-' if o.peak_share is None else f'{o.peak_share:.1%}'} | {_s(o.restarted_s)} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def refusal_table(outcomes: list[Outcome]) -> str:
    """The refusing stop against the acceptance: <= 0.1 % admitted from 1 s after the decision at the brokers, the
    decision there within the check interval (1 s) + 1 s of the fill, every client back within 2 s of the release."""
    rows = ["| scenario | clients | before (MB/s) | fill -> refusing at every broker | admitted from 1 s after | "
            "free -> released at every broker | release -> slowest client back | spare topic kept | targets |",
            "|---" * 9 + "|"]
    for o in outcomes:
        if o.system != "refuse":
            continue
        met = (o.stop_at_brokers_s is not None and o.stop_at_brokers_s <= 2.0
               and o.admitted_after_stop_share is not None and o.admitted_after_stop_share <= 0.001
               and o.back_from_release_max_s is not None and o.back_from_release_max_s <= 2.0
               and (o.spare_share is None or o.spare_share >= 0.95))
        rows.append(f"| {o.scenario} ({o.setting}) | {o.clients} {o.kind} | {o.pre_rate / 1e6:.2f} | "
                    f"{_s(o.stop_at_brokers_s, 'not seen')} | "
                    f"{'-' if o.admitted_after_stop_share is None else f'{o.admitted_after_stop_share:.3%}'} | "
                    f"{_s(o.release_at_brokers_s, 'not seen')} | {_s(o.back_from_release_max_s, 'not back')} | "
                    f"{'-' if o.spare_share is None else f'{o.spare_share:.1%}'} | {'met' if met else 'missed'} |")
    return "\n".join(rows) if len(rows) > 2 else ""


def java_targets(outcomes: list[Outcome]) -> list[str]:
    """Issue 24's target for Java clients at this project's max mute: <= 5 % in total, every client back in 15 s."""
    lines = []
    for o in outcomes:
        if o.kind == "java" and o.system == "quota-pipeline" and o.scenario == "fill":
            met = o.admitted_share <= 0.05 and o.back_max_s is not None and o.back_max_s <= 15.0
            lines.append(f"Java target at {o.setting}, {o.clients} clients (<= 5 % admitted, every client back "
                         f"within 15 s): {o.admitted_share:.1%}, slowest {_s(o.back_max_s, 'not back')}: "
                         f"{'met' if met else 'missed'}")
    return lines


def _label(o: Outcome) -> str:
    return f"{o.system} {o.setting}, {o.clients} {o.kind}"


def chart(outcomes: list[Outcome], path: Path) -> None:
    """Left: the fill runs on the trade-off (admitted at factor 0 against the slowest return); right: the stop and
    offline runs' aggregate rate per 5 s while node 1 was stopped or its log dir offline."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fills = [o for o in outcomes if o.scenario == "fill"]  # targeted: the spare topic's share is not admitted
    helds = [o for o in outcomes if o.scenario in ("stop", "offline") and o.held_rates]
    panels = [p for p in (fills and "fill", helds and "held") if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 4.8), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        (_trade_off if panel == "fill" else _held_rates)(ax, fills if panel == "fill" else helds)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _trade_off(ax, outcomes: list[Outcome]) -> None:
    """One colour per system and setting, one marker per client set; filled: the whole stop, hollow: its last 20 s.
    A run whose clients were not all back is drawn at the right edge, marked so."""
    from matplotlib.lines import Line2D
    colors: dict[str, str] = {}
    backs = [o.back_max_s for o in outcomes if o.back_max_s is not None]
    edge = 1.15 * max(backs + [10.0])
    groups: dict[str, list[tuple[float, float, str]]] = {}
    for o in outcomes:
        color = colors.setdefault(f"{o.system} {o.setting}", f"C{len(colors)}")
        marker = {"java": "s", "small": "v"}.get(o.kind) or {1: "^", 32: "D"}.get(o.clients, "o")
        back = o.back_max_s if o.back_max_s is not None else edge
        whole, last = 100 * o.admitted_share, 100 * o.last20_share
        ax.plot([back, back], [whole, last], color=color, alpha=0.4)
        ax.scatter([back], [whole], marker=marker, s=70, color=color)
        ax.scatter([back], [last], marker=marker, s=70, facecolors="none", edgecolors=color)
        note = f"{o.clients} {o.kind}" + ("" if o.back_max_s is not None else f": {o.not_back} not back in {return_wait(o.system):.0f} s ->")
        groups.setdefault(color, []).append((back, whole, note))
    for color, points in groups.items():
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        if len(points) > 1 and max(xs) - min(xs) < 0.08 * edge and max(ys) - min(ys) < 8:  # one label for a cluster
            points = [(max(xs), max(ys), ", ".join(p[2] for p in points))]
        for back, whole, note in points:
            right = note.endswith("->")
            ax.annotate(note, (back, whole), textcoords="offset points", xytext=(-6 if right else 7, 3),
                        ha="right" if right else "left", fontsize=7, color=color)
    handles = [Line2D([], [], color=c, marker="o", linestyle="", label=k) for k, c in colors.items()]
    handles += [Line2D([], [], color="grey", marker="o", linestyle="", label="whole stop"),
                Line2D([], [], color="grey", marker="o", markerfacecolor="none", linestyle="", label="its last 20 s")]
    _finish(ax, "free -> slowest client's first acknowledged record (s)", "admitted at factor 0 (% of the earlier rate)",
            "Factor 0: what a stop admits against how fast clients return")
    ax.set_xlim(0, edge * 1.05)
    ax.legend(handles=handles, fontsize=8, loc="upper center")


def _held_rates(ax, outcomes: list[Outcome]) -> None:
    for i, o in enumerate(outcomes):
        shares = [100 * r / o.pre_rate for r in o.held_rates]
        ax.step([5 * k for k in range(len(shares) + 1)], shares + shares[-1:], where="post", color=f"C{i}",
                linestyle="--" if o.system == "strimzi" else "-", label=f"{o.scenario}: {_label(o)}")
        if o.factor_raised_s is not None:  # the brokers' factor went above 0 here
            ax.axvline(o.factor_raised_s, color=f"C{i}", linestyle="-.", linewidth=1, alpha=0.7)
    ax.axhline(100 * RELEASED_SHARE, color="grey", linewidth=0.8, linestyle=":")
    _finish(ax, "s since node 1 stopped / its log dir went offline (still full)",
            "admitted per 5 s (% of the earlier rate)",
            "Does the throttle hold while the full broker is gone? (-.-: factor > 0 on node 2)")


def _finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    """Both panels: axes from 0, their labels and title, a light grid and a small legend."""
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _counts(text: str, flag: str) -> list[int]:
    """Comma-separated client counts; 0 or nothing: none."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: {flag} takes comma-separated client counts, e.g. 1,8 (got {text!r})") from None
    if any(n < 0 for n in counts):
        raise SystemExit(f"error: {flag} takes counts of 0 or more (got {text!r})")
    return [n for n in counts if n > 0]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strimzi-jar", type=Path, help=f"a Strimzi plugin jar (default: {STRIMZI_JAR}, fetched "
                        "from Maven Central with mvn -f bench/strimzi dependency:copy)")
    parser.add_argument("--strimzi-interval", default="2", help="Strimzi's storage.check-interval, seconds (2)")
    parser.add_argument("--callback-jar", type=Path, help="this project's plugin jar (default: built from "
                        "broker-callback/ with mvn package)")
    parser.add_argument("--mutes", default="PT32S,PT60S", help="this project's throttle.max.mute settings")
    parser.add_argument("--clients", help="librdkafka client counts, comma-separated (8; none when --java-clients "
                        "is given without it)")
    parser.add_argument("--java-clients", default="", help="Java client counts (default producer settings), "
                        "comma-separated (none)")
    parser.add_argument("--small-apps", default="", help="counts of small applications (librdkafka, 1 kB records, "
                        "8 kB/s each, acks=all), comma-separated (none)")
    parser.add_argument("--scopes", default="topics", help="the refusing stop's quota.pipeline.stop.scope settings "
                        "(system refuse), comma-separated: topics, cluster (topics)")
    parser.add_argument("--scenarios", default="fill", help="comma-separated, from fill, stop, offline, targeted (fill; see "
                        "above)")
    parser.add_argument("--stop-seconds", type=float, default=180.0,
                        help="how long node 1 stays full, from the fill to the free (180)")
    parser.add_argument("--quota-window-num", type=int, default=11,
                        help="the brokers' quota.window.num (Kafka's 11): this project's shortest max mute is "
                        "(num - 1) + 2 x num seconds, so --mutes PT15S needs 5 or less")
    parser.add_argument("--systems", default="strimzi,quota-pipeline,refuse",
                        help="comma-separated: strimzi (its plugin), quota-pipeline (this project's throttle at "
                        "each --mutes), refuse (this project's refusing stop at each --scopes)")
    parser.add_argument("--job-priority", type=int, default=JOB_PRIORITY[0],
                        help="added to the job's niceness (default -5, as root: ahead of the brokers, as a job on a "
                             "host of its own is; 0: the brokers' priority)")
    parser.add_argument("--json", type=Path, help="write the outcomes here")
    parser.add_argument("--chart", type=Path, help="write the chart (PNG) here")
    parser.add_argument("--from-json", type=Path, nargs="+", help="print the tables and draw the chart of earlier "
                        "runs (several files: their outcomes in that order)")
    args = parser.parse_args(argv)
    if args.job_priority < 0 and os.geteuid() != 0:
        parser.error("--job-priority below 0 needs root (a process may only lower its own priority)")
    JOB_PRIORITY[0] = args.job_priority
    rd = _counts("8" if args.clients is None and not args.java_clients and not args.small_apps
                 else args.clients or "", "--clients")
    args.client_sets = [("librdkafka", n) for n in rd] + [("java", n) for n in _counts(args.java_clients,
                                                                                       "--java-clients")] + \
        [("small", n) for n in _counts(args.small_apps, "--small-apps")]
    args.scenario_list = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in args.scenario_list if s not in SCENARIOS]
    if unknown or not args.scenario_list:
        raise SystemExit(f"error: --scenarios takes fill, stop, offline and targeted, comma-separated "
                         f"(got {args.scenarios!r})")
    if not args.from_json and not args.client_sets:
        raise SystemExit("error: no clients: give --clients or --java-clients a count above 0")
    if not args.from_json and args.stop_seconds < 20:
        raise SystemExit("error: --stop-seconds must be 20 or more (the last 20 s of the stop are measured)")
    return args


def report(outcomes: list[Outcome], chart_path: Path | None) -> None:
    print(table(outcomes))
    refusals = refusal_table(outcomes)
    if refusals:
        print()
        print(refusals)
    held = held_table(outcomes)
    if held:
        print()
        print(held)
    for line in java_targets(outcomes):
        print(line)
    if chart_path:
        chart(outcomes, chart_path)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        raise
    if args.from_json:
        report([Outcome(**d) for path in args.from_json for d in json.loads(path.read_text())], args.chart)
        return 0
    try:
        home = rk.kafka_home()
    except rk.KafkaUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    patch_cluster_start()
    systems = args.systems.split(",")
    strimzi = (args.strimzi_jar or ensure_jar(STRIMZI_JAR, ["mvn", "-q", "-B", "-f", str(STRIMZI_POM),
                                                            "dependency:copy"], "Strimzi's plugin")
               ) if "strimzi" in systems else None
    ours = (args.callback_jar or callback_jar()) if {"quota-pipeline", "refuse"} & set(systems) else None
    work = Path(tempfile.mkdtemp(prefix="strimzi-compare-"))
    classes = compile_java(home, work / "classes") if any(k == "java" for k, _ in args.client_sets) else None
    outcomes: list[Outcome] = []
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    runs = ([("strimzi", args.strimzi_interval, strimzi)] if "strimzi" in systems else []) + \
           ([("quota-pipeline", m, ours) for m in args.mutes.split(",")] if "quota-pipeline" in systems else []) + \
           ([("refuse", scope, ours) for scope in args.scopes.split(",")] if "refuse" in systems else [])
    for scenario in args.scenario_list:
        for kind, n in args.client_sets[:1] if scenario == "targeted" else args.client_sets:
            for system, setting, jar in runs:
                if scenario == "targeted" and system != "refuse":
                    continue  # only a refusing stop targets topics; the throttle is broker-wide
                started = time.time()
                o = run_scenario(system, setting, jar, kind, n, scenario, args.stop_seconds, home, work, classes,
                                 args.quota_window_num)
                outcomes.append(o)
                print(json.dumps(asdict(o)), f"({time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f})",
                      flush=True)
                if args.json:
                    args.json.write_text(json.dumps([asdict(x) for x in outcomes], indent=1))
    report(outcomes, args.chart)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
