"""Fault campaign (Jepsen-style): real Kafka, the streaming job, the broker callback or `enforce`, real producers,
seeded faults, then verify/checker.py over the recorded history.

    KAFKA_HOME=/work/shared/kafka/kafka_2.13-4.1.0 python3 -m verify.campaign --seed 1 --minutes 30 --interval PT2S

Starts (root: every node's tmpfs log dir) a 3-node KRaft cluster whose brokers load the callback jar (built from
broker-callback/ into build/campaign-callback/), each node with a disk log dir and a tmpfs log dir that can really
fill; a 1-node output cluster for the decision topic (or, with --output-on-observed, the topic on the observed
cluster); `quota-pipeline run` observing the cluster; paced librdkafka producers with their own client ids, each in
its own process. With --enforce the brokers load no callback: `quota-pipeline enforce` follows the topic and writes
client quotas on the observed cluster instead, and the schedule also kills it -9 (it is restarted at once). The seeded schedule (printed; the same seed replays it) injects overlapping faults: a tmpfs filled
past the hard limit, or on to ENOSPC (offline; freed and the broker restarted, as an operator would), kill -9,
SIGSTOP/SIGCONT (short ones: slow admin responses), clean stops (a full broker too), the controller leader restarted,
the job killed -9 and restarted from its checkpoint, the output broker stopped for longer than the validity, a
malformed and a future-dated record written to the topic by a foreign client (`campaign-forger`; without an
authorizer every client may write, which is the grant). The history goes to --work/history; the checker's lines and
summary are printed; exit code 1 when it found a violation. Every loop is bounded in time, and everything started
is stopped at the end, on an error and on Ctrl-C (atexit as a last resort).
"""
from __future__ import annotations

import argparse
import atexit
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from verify import checker as cc
from verify import load as campaign_load
from verify.faults import Planned, describe, schedule
from harness import kafka as rk
from harness.callback_jar import callback_jar
from harness import kafka_config as rc
from harness.kafka import ClusterSpec, RealKafka, hold_ports, start_cluster
from harness.kafka_process import FAST_START_JVM, log_lines
from harness.kafka_stall import fill
from harness.stream_job import start_job, stop_job


MiB = 1024 * 1024
CLUSTER = "campaign"
CALLBACK = "io.quotapipeline.callback.PipelineQuotaCallback"
AUTHORIZER = "io.quotapipeline.callback.StopAuthorizer"
FORGER = "campaign-forger"
P = "client.quota.callback.static."
BALLAST = "campaign-ballast"

# LogManager's line when Kafka takes a log dir offline (a write failed there: ENOSPC or another I/O error).
OFFLINE_LINE = re.compile(r"Stopping serving logs in dir (\S+)")


def offline_events(nodes: dict) -> list[dict]:
    """Each log dir Kafka took offline, from every node's server.log and its hourly rolled files: the checker's
    evidence, from Kafka and not from the pipeline (a dir filled to 0 bytes stays online unless a write failed)."""
    return sorted(({"t": t, "node": number, "log_dir": found.group(1)}
                   for number, node in nodes.items() for t, found in log_lines(node.logs, OFFLINE_LINE)),
                  key=lambda e: e["t"])


@dataclasses.dataclass(frozen=True)
class Settings:
    seed: int
    seconds: float
    interval_s: float = 2.0
    validity_s: float = 20.0  # 10 intervals: a micro-batch on 2 busy cores can take several
    output_on_observed: bool = False
    tmpfs_mb: int = 40
    hard_mb: int = 10
    producers: int = 3
    rate: float = 300_000.0  # bytes/s each producer offers: 4x what a stop admits from it per broker
    record_bytes: int = 10_240
    batch_bytes: int = 16_384
    partitions: int = 6
    max_mute_s: float = 60.0  # quota.pipeline.throttle.max.mute (the default): the stop's limit follows from it
    enforce: bool = False  # `quota-pipeline enforce` (client quotas) instead of the callback on the brokers
    refuse: bool = False  # the brokers also load the stop authorizer: writes refused at factor 0, not throttled
    fallback: float = 1.0
    replay: bool = True
    job_properties: tuple[tuple[str, str], ...] = ()  # extra job properties (a misconfigured job, for the checker)
    faults: tuple[Planned, ...] | None = None  # a fixed schedule instead of the seeded one
    exclude: tuple[str, ...] = ()  # fault kinds the seeded schedule never draws


def iso_duration(text: str) -> float:
    found = re.fullmatch(r"PT(\d+(?:\.\d+)?)S", text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds as PT<n>S, e.g. PT2S")
    return float(found.group(1))


# ---------------------------------------------------------------- recorders


class Recorder:
    """Threads that write the history: disk samples, the decision topic, the job's log with arrival times."""

    def __init__(self, history: Path) -> None:
        self.history = history
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.published: list[cc.Published] = []
        self.lock = threading.Lock()

    def spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=self._guard(target), name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _guard(self, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # a recorder that dies leaves a hole in the history: say so in it
                with open(self.history / "recorder-errors.txt", "a") as fh:
                    fh.write(f"{time.time()}\t{threading.current_thread().name}\t{exc!r}\n")
        return run

    def disks(self, dirs: dict[int, str]) -> None:
        with open(self.history / "disks.jsonl", "a") as out:
            while not self.stopping.wait(0.25):
                for node, path in dirs.items():
                    st = os.statvfs(path)
                    out.write(json.dumps({"t": time.time(), "node": node, "log_dir": path,
                                          "available": st.f_bavail * st.f_frsize}) + "\n")
                out.flush()

    def topic(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "campaign-checker", "log_level": 0,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            while not self.stopping.is_set():
                meta = consumer.list_topics(topic, timeout=2).topics.get(topic)
                if meta is not None and meta.error is None and meta.partitions:
                    consumer.assign([TopicPartition(topic, p, 0) for p in sorted(meta.partitions)])
                    break
                self.stopping.wait(0.5)
            with open(self.history / "published.jsonl", "a") as out:
                while not self.stopping.is_set():
                    msg = consumer.poll(0.2)
                    if msg is None or msg.error():
                        continue
                    p = cc.Published(time.time(), msg.partition(), msg.offset(),
                                     None if msg.key() is None else msg.key().decode(errors="replace"),
                                     None if msg.value() is None else msg.value().decode(errors="replace"))
                    with self.lock:
                        self.published.append(p)
                    out.write(json.dumps(dataclasses.asdict(p)) + "\n")
                    out.flush()
        finally:
            consumer.close()

    def job_log(self, log: Path, name: str = "job.tlog") -> None:
        """Copy a process's log into the history as it grows, each line with its arrival time."""
        with open(self.history / name, "a") as out:
            while not log.exists() and not self.stopping.wait(0.2):
                pass
            with open(log, errors="replace") as fh:
                while True:
                    line = fh.readline()
                    if line:
                        out.write(f"{time.time()}\t{line.rstrip()}\n")
                        continue
                    out.flush()
                    if self.stopping.wait(0.2):
                        return

    def latest_decision(self) -> dict | None:
        with self.lock:
            for p in reversed(self.published):
                try:
                    return json.loads(p.value)
                except (TypeError, ValueError):
                    continue
        return None

    def decisions_since(self, t: float) -> int:
        """The job's records that arrived since `t` (forged ones do not parse, or are dated ahead)."""
        def job_record(p: cc.Published) -> bool:
            try:
                return cc.parse_time(json.loads(p.value)["observed_at"]) <= p.arrived + 60
            except (TypeError, ValueError, KeyError):
                return False
        with self.lock:
            return sum(1 for p in self.published if p.arrived >= t and job_record(p))

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(10)


# ---------------------------------------------------------------- the campaign


class Campaign:
    """Everything the campaign started, the faults it injected and the job runs, with one stop for all."""

    def __init__(self, s: Settings, work: Path, log: Callable[[str], None] = print) -> None:
        self.s, self.work, self.log = s, work, log
        self.history = work / "history"
        self.history.mkdir(parents=True, exist_ok=True)
        self.topic = f"campaign-decisions-{s.seed}"
        self.recorder = Recorder(self.history)
        self.observed: RealKafka | None = None
        self.output: RealKafka | None = None
        self.job: subprocess.Popen | None = None
        self.enforcer: subprocess.Popen | None = None
        self.job_started = 0.0
        self.runs: list[cc.JobRun] = []
        self.faults: list[cc.Fault] = []
        self.producers: list[Any] = []
        self.node_lock = threading.Lock()
        self.job_lock = threading.Lock()
        self.fault_threads: list[threading.Thread] = []
        # Nodes die with the thread that started them (PR_SET_PDEATHSIG in harness/kafka_process.py acts on the
        # parent thread): every restart runs on this one thread, which lives as long as the campaign.
        self.starter = ThreadPoolExecutor(1, thread_name_prefix="starter")
        self.stopped = False
        self.conf = work / "job.properties"
        atexit.register(self.stop)

    # -- start

    def start(self) -> None:
        s = self.s
        jar = None if s.enforce else callback_jar()
        self.log("enforce: client quotas, no callback" if jar is None else
                 f"callback{' and stop authorizer' if s.refuse else ''}: jar {jar}")
        if not s.output_on_observed:
            self.output = start_cluster(ClusterSpec(nodes=1, log_dirs=1, jvm_opts=FAST_START_JVM))
        self.observed = self._start_observed(jar)
        self.log(f"observed cluster {self.observed.bootstrap()}, output {self.output_bootstrap}")
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient(self.observed.client_config())
        admin.create_topics([NewTopic("load", s.partitions, 2, config={
            "retention.bytes": str(2 * MiB), "segment.bytes": str(MiB)})])["load"].result(60)
        if s.refuse:
            self._load_on_every_tmpfs()
        self._write_job_config()
        self.recorder.spawn(lambda: self.recorder.disks(self.tmpfs_dirs), "disks")
        self.recorder.spawn(lambda: self.recorder.topic(self.output_bootstrap, self.topic), "topic")
        self.recorder.spawn(lambda: self.recorder.job_log(self.work / "job.log"), "job-log")
        if s.enforce:
            self.recorder.spawn(lambda: self.recorder.job_log(self.work / "enforcer.log", "enforcer.tlog"),
                                "enforcer-log")
            self._start_enforcer()
        self._start_job()
        self._wait(lambda: self.recorder.latest_decision() is not None or self.job.poll() is not None, 300,
                   "the job's first decision")
        if self.job.poll() is not None:
            raise RuntimeError(f"the job exited with code {self.job.returncode} before its first decision:\n"
                               + "\n".join((self.work / "job.log").read_text(errors="replace").splitlines()[-15:]))
        for i in range(1, s.producers + 1):
            self.producers.append(campaign_load.start(self.observed.bootstrap(), "load", f"app-{i}", s.rate,
                                                      s.record_bytes, s.batch_bytes, s.seconds + 600))

    def _load_on_every_tmpfs(self) -> None:
        """A replica of the load topic on every node's tmpfs dir: the checker then knows, without the pipeline's
        word, that a low tmpfs dir stops the load topic (a targeted stop refuses the topics of the full dir)."""
        from confluent_kafka.admin import AdminClient
        admin = AdminClient(self.observed.client_config())
        partitions: dict = {}

        def every_node_listed() -> bool:  # right after the topic's creation the metadata may not list it all yet
            partitions.clear()
            partitions.update(admin.list_topics("load", timeout=30).topics["load"].partitions)
            return all(any(n in m.replicas for m in partitions.values()) for n in self.tmpfs_dirs)
        self._wait(every_node_listed, 60, "the load topic's replicas in the metadata")
        for node, directory in self.tmpfs_dirs.items():
            partition = next(p for p, m in sorted(partitions.items()) if node in m.replicas)

            def placed(node=node, directory=directory, partition=partition) -> bool:
                if os.path.isdir(os.path.join(directory, f"load-{partition}")):  # not "-future": the move is done
                    return True
                rk.with_admin(self.observed,
                                     lambda a: a.alter_replica_log_dirs({("load", partition, node): directory}))
                time.sleep(0.5)
                return False
            self._wait(placed, 60, f"partition {partition} of load on node {node}'s tmpfs")

    def _start_observed(self, jar: Path | None) -> RealKafka:
        s = self.s
        # The callback needs the output cluster's address in its config before the nodes start; on the observed
        # cluster that is the cluster's own ports, so they are chosen here and handed to start_cluster.
        ports = rk.free_ports(3 * len(rc.LISTENERS))
        plaintext = [ports[i * len(rc.LISTENERS) + rc.LISTENERS.index(rc.PLAINTEXT)] for i in range(3)]
        own = ",".join(f"127.0.0.1:{p}" for p in plaintext)
        output = own if s.output_on_observed else self.output.bootstrap()
        callback = {} if jar is None else {
            "client.quota.callback.class": CALLBACK, "quota.pipeline.cluster.name": CLUSTER,
            "quota.pipeline.output.kafka.bootstrap.servers": output, "quota.pipeline.output.topic": self.topic,
            "quota.pipeline.output.topic.on.this.cluster": str(s.output_on_observed).lower(),
            "quota.pipeline.throttle.max.mute": f"PT{s.max_mute_s:g}S",
            f"{P}throttle.factor.validity.duration": f"PT{s.validity_s:g}S",
            f"{P}throttle.factor.fallback": str(s.fallback),
            # The refusing stop: the authorizer over Kafka's own, open as a cluster without ACLs is; the controllers
            # (User:ANONYMOUS on PLAINTEXT) are super users, as StandardAuthorizer needs before its ACLs load.
            **({"authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true",
                "super.users": "User:ANONYMOUS"} if s.refuse else {})}
        overrides = {
            **callback, "log.segment.bytes": str(MiB), "log.retention.bytes": str(2 * MiB),
            "log.retention.check.interval.ms": "2000", "log.segment.delete.delay.ms": "1000",
            # Retention's first pass 1 s after a start, not 30 s: a node restarted after an ENOSPC fill frees its
            # tmpfs before new writes fill it again.
            "log.initial.task.delay.ms": "1000",
            "replica.lag.time.max.ms": "10000"}
        original = rk.free_ports
        rk.free_ports = lambda count: list(ports) if count == len(ports) else original(count)
        if jar is not None:  # kafka-run-class.sh puts it before Kafka's libs; nothing else runs yet
            os.environ["CLASSPATH"] = str(jar)
        try:
            cluster = start_cluster(ClusterSpec(nodes=3, log_dirs=2, tmpfs_mb=s.tmpfs_mb, tmpfs_nodes=3,
                                                jvm_opts=FAST_START_JVM, overrides=overrides))
        finally:
            rk.free_ports = original
            os.environ.pop("CLASSPATH", None)
        for node in cluster.nodes.values() if jar is not None else ():  # restarts load the callback too
            node.env = (lambda base: lambda jvm_opts=None: {**base(jvm_opts), "CLASSPATH": str(jar)})(node.env)
        return cluster

    @property
    def output_bootstrap(self) -> str:
        return self.observed.bootstrap() if self.s.output_on_observed else self.output.bootstrap()

    @property
    def tmpfs_dirs(self) -> dict[int, str]:
        return {n: dirs[-1] for n, dirs in self.observed.log_dirs.items()}

    def _write_job_config(self) -> None:
        s = self.s
        props = {f"{P}kafka.admin.bootstrap.servers": self.observed.bootstrap(),
                 f"{P}storage.per.volume.limit.min.available.bytes": str(s.hard_mb * MiB),
                 f"{P}storage.check.interval": f"PT{s.interval_s:g}S",
                 f"{P}throttle.factor.validity.duration": f"PT{s.validity_s:g}S",
                 f"{P}throttle.factor.fallback": str(s.fallback),
                 "quota.pipeline.throttle.max.mute": f"PT{s.max_mute_s:g}S",
                 "quota.pipeline.cluster.name": CLUSTER, "quota.pipeline.output.topic": self.topic,
                 "quota.pipeline.checkpoint.path": str(self.work / "checkpoint"),
                 "quota.pipeline.output.kafka.bootstrap.servers": self.output_bootstrap,
                 "quota.pipeline.output.topic.on.this.cluster": str(s.output_on_observed).lower(),
                 **dict(s.job_properties)}
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _start_job(self) -> None:
        self.job = start_job(self.conf, self.work / "job.log")
        self.job_started = time.time()

    def _start_enforcer(self) -> None:
        """`quota-pipeline enforce` on the job's properties, in its own session, checking the topic every second."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.enforcer = subprocess.Popen(
            [sys.executable, "-m", "quota_pipeline.cli", "enforce", str(self.conf), "--interval", "1",
             "--stop", "throttle"],
            stdout=(self.work / "enforcer.log").open("ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=self.work, start_new_session=True)

    def _end_run(self, cause: str) -> None:
        self.runs.append(cc.JobRun(self.job_started, time.time(), self.job.returncode, cause))

    def watch_job(self) -> None:
        """Record a job that exits by itself, and start it again so that the campaign goes on."""
        while not self.recorder.stopping.wait(0.5):
            with self.job_lock:
                if self.job is not None and self.job.poll() is not None:
                    self._end_run("exited")
                    self.log(f"the job exited by itself with code {self.job.returncode}; restarting it")
                    self._start_job()
                if self.enforcer is not None and self.enforcer.poll() is not None:
                    self.runs.append(cc.JobRun(time.time(), time.time(), self.enforcer.returncode, "enforcer exited"))
                    self.log(f"enforce exited by itself with code {self.enforcer.returncode}; restarting it")
                    self._start_enforcer()

    def _wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while not done():
            if time.time() > deadline:
                raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
            time.sleep(0.2)

    # -- faults

    def inject(self, p: Planned) -> None:
        start = time.time()
        detail: dict[str, Any] = {}
        try:
            getattr(self, f"_fault_{p.kind}")(p, detail)
        except Exception as exc:  # the fault log says what failed; the campaign goes on
            detail["error"] = repr(exc)
        fault = cc.Fault(p.kind, detail.pop("target", p.target), start, time.time(), detail)
        self.faults.append(fault)
        self.log(f"  fault {p.kind} {fault.target} +{start - self.t0:.1f}..+{fault.end - self.t0:.1f} s {detail}")

    def _start_node(self, cluster: RealKafka, node: int) -> None:
        self.starter.submit(cluster.start_node, node).result(600)

    def _node(self, target: str) -> int:
        return int(target[4:])

    def _ramp(self, node: int, target_available: int) -> None:
        """Fill the node's tmpfs down to `target_available` free bytes in 4 steps over 2 intervals."""
        path = Path(self.tmpfs_dirs[node]) / BALLAST
        with open(path, "ab") as fh:
            for step in range(4, 0, -1):
                st = os.statvfs(path.parent)
                need = st.f_bavail * st.f_frsize - target_available
                if need > 0:
                    try:
                        fh.write(bytes(need // step))
                        fh.flush()
                    except OSError:
                        return
                time.sleep(self.s.interval_s / 2)

    def _free(self, node: int) -> None:
        for name in (BALLAST, "ballast"):
            try:
                os.remove(Path(self.tmpfs_dirs[node]) / name)
            except FileNotFoundError:
                pass

    def _until(self, t: float) -> None:
        time.sleep(max(0.0, t - time.time()))

    def _fault_fill_hard(self, p: Planned, detail: dict) -> None:
        node, start = self._node(p.target), time.time()
        try:
            self._ramp(node, self.s.hard_mb * MiB // 2)
            self._until(start + p.hold)
        finally:
            self._free(node)

    def _fault_fill_enospc(self, p: Planned, detail: dict) -> None:
        node, start = self._node(p.target), time.time()
        try:
            self._ramp(node, self.s.hard_mb * MiB // 2)
            time.sleep(2 * self.s.interval_s)
            fill(self.tmpfs_dirs[node])
            self._until(start + p.hold)
        finally:
            self._free(node)
        with self.node_lock:  # an offline log dir comes back only with a restart, as an operator would do it
            self.observed.stop_node(node)
            self._start_node(self.observed, node)

    def _fault_kill9(self, p: Planned, detail: dict, hold: float | None = None) -> None:
        node = self._node(p.target)
        with self.node_lock:
            self.observed.nodes[node].stop(clean=False)
            self.observed.held[node] = hold_ports(list(self.observed.nodes[node].layout.ports.values()))
            time.sleep(p.hold if hold is None else hold)
            self._start_node(self.observed, node)

    def _fault_stop(self, p: Planned, detail: dict) -> None:
        node = self._node(p.target)
        detail["full"] = os.statvfs(self.tmpfs_dirs[node]).f_bavail * os.statvfs(
            self.tmpfs_dirs[node]).f_frsize <= self.s.hard_mb * MiB
        with self.node_lock:
            self.observed.stop_node(node)
            time.sleep(p.hold)
            self._start_node(self.observed, node)

    def _fault_pause(self, p: Planned, detail: dict) -> None:
        node = self.observed.nodes[self._node(p.target)]
        with self.node_lock:
            os.killpg(node.process.pid, signal.SIGSTOP)
            try:
                time.sleep(p.hold)
            finally:
                os.killpg(node.process.pid, signal.SIGCONT)

    _fault_pause_short = _fault_pause

    def _fault_controller_restart(self, p: Planned, detail: dict) -> None:
        leader = quorum_leader(self.observed)
        detail["target"] = f"node{leader}"
        self._fault_kill9(Planned(p.at, "kill9", f"node{leader}", 0.0), detail, hold=0.0)

    def _fault_job_kill(self, p: Planned, detail: dict) -> None:
        with self.job_lock:
            os.killpg(self.job.pid, signal.SIGKILL)
            self.job.wait(30)
            self._end_run("fault")
            self._start_job()
            restarted = time.time()
        # The fault lasts until the restarted job publishes again (Spark's start-up is part of it).
        self._wait(lambda: self.recorder.decisions_since(restarted) > 0, 300, "the restarted job's first decision")
        detail["first_decision_after_s"] = round(time.time() - restarted, 1)

    def _fault_enforcer_kill(self, p: Planned, detail: dict) -> None:
        """kill -9 of `enforce`: the quotas it wrote stay in force until the restarted one takes over."""
        with self.job_lock:
            os.killpg(self.enforcer.pid, signal.SIGKILL)
            self.enforcer.wait(30)
            self._start_enforcer()

    def _fault_output_stop(self, p: Planned, detail: dict) -> None:
        self.output.stop_node(1)
        time.sleep(p.hold)
        self._start_node(self.output, 1)

    def _forge(self, value: bytes, detail: dict) -> None:
        from confluent_kafka import Producer
        offsets: list[list[int]] = []
        producer = Producer({"bootstrap.servers": self.output_bootstrap, "client.id": FORGER, "log_level": 0})
        producer.produce(self.topic, key=CLUSTER.encode(), value=value,
                         on_delivery=lambda err, msg: err is None and offsets.append([msg.partition(), msg.offset()]))
        if producer.flush(30):  # not delivered (the output broker is down): make sure it never is, unrecorded
            producer.purge()
            producer.flush(0)
        detail["offsets"] = offsets

    def _fault_forge_malformed(self, p: Planned, detail: dict) -> None:
        self._forge(b'{"schema_version": 2, "cluster_id": "campaign", "throttle_factor": "one"', detail)

    def _fault_forge_future(self, p: Planned, detail: dict) -> None:
        """A well-formed release dated an hour ahead: a reader that took it would keep 1.0 for the hour."""
        record = dict(self.recorder.latest_decision() or {})
        ahead = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        text = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"  # noqa: E731
        record.update(observed_at=text(ahead), decided_at=text(ahead), throttle_factor=1.0, source="OBSERVATION",
                      valid_until=text(ahead + dt.timedelta(seconds=self.s.validity_s)), violations=0)
        self._forge(json.dumps(record).encode(), detail)

    # -- run

    def run(self, planned: list[Planned]) -> None:
        self.t0 = time.time()
        self.recorder.spawn(self.watch_job, "job-watch")
        for p in sorted(planned, key=lambda p: p.at):
            self._until(self.t0 + p.at)
            thread = threading.Thread(target=self.inject, args=(p,), name=p.kind, daemon=True)
            thread.start()
            self.fault_threads.append(thread)
        self._until(self.t0 + self.s.seconds)
        for thread in self.fault_threads:
            thread.join(max(1.0, self.t0 + self.s.seconds + 300 - time.time()))
        # A calm tail after the last fault (a restart can end long after its start), so the release is judged: at
        # least 3 intervals and 15 s, and until the job has published 3 decisions since (on a loaded machine its
        # recovery from an output outage took a minute and more, which left too few decisions to judge).
        last = max((f.end for f in self.faults), default=self.t0)
        calm, deadline = last + 3 * self.s.interval_s + 15, time.time() + 180
        while time.time() < deadline and (time.time() < calm or self.recorder.decisions_since(last) < 3):
            time.sleep(0.5)
        self.t_end = time.time()

    def finish(self) -> Path:
        """Stop the load and the job, replay the journal, write the history's remaining files."""
        for producer in self.producers:
            producer.stop()
        with self.job_lock:  # the watcher sees no job afterwards, so this stop is not taken for an exit
            stop_job(self.job)
            self._end_run("campaign")
            self.job = None
            stop_job(self.enforcer)  # it restores the quotas it changed
            self.enforcer = None
        time.sleep(2)  # the topic reader catches up with the last records
        self.recorder.stop()
        s = self.s
        samples = [{"t": x.t, "client": p.client_id, "acked": x.acked, "failed": x.failed}
                   for p in self.producers for x in p.samples]
        write_jsonl(self.history / "producers.jsonl", samples)
        write_jsonl(self.history / "faults.jsonl", [dataclasses.asdict(f) for f in self.faults])
        write_jsonl(self.history / "job_runs.jsonl", [dataclasses.asdict(r) for r in self.runs])
        write_jsonl(self.history / "offline.jsonl", offline_events(self.observed.nodes))
        meta = cc.Meta(interval_s=s.interval_s, validity_s=s.validity_s, hard_limit_bytes=s.hard_mb * MiB,
                       fallback=s.fallback, stop_limit_bytes_per_s=0.0 if s.refuse else stop_limit(s),
                       producers=s.producers, brokers=3, request_bytes=s.partitions * s.batch_bytes,
                       output_on_observed=s.output_on_observed, seed=s.seed, start=self.t0, end=self.t_end,
                       enforcer="enforce" if s.enforce else "refuse" if s.refuse else "callback")
        (self.history / "meta.json").write_text(json.dumps({**dataclasses.asdict(meta), "cluster": CLUSTER}))
        if s.replay:
            self.replay()
        return self.history

    def replay(self) -> None:
        journal = self.work / "checkpoint" / "journal"
        out = self.work / "replay" / "replayed.jsonl"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "replay", "--config", str(self.conf),
                               "--input", str(journal), "--output", str(out)], capture_output=True, text=True,
                              timeout=900, env=env, cwd=self.work)
        if done.returncode != 0:
            raise RuntimeError(f"quota-pipeline replay failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        shutil.copy(out, self.history / "replayed.jsonl")

    def stop(self) -> None:
        """Stop everything started (idempotent): faults' pauses are undone, job, producers, clusters."""
        if self.stopped:
            return
        self.stopped = True
        self.recorder.stopping.set()
        if self.observed is not None:
            for node in self.observed.nodes.values():
                if node.process is not None:
                    try:
                        os.killpg(node.process.pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
        for producer in self.producers:
            producer.stop()
        stop_job(self.job, grace=15)
        stop_job(self.enforcer, grace=15)
        self.starter.shutdown(wait=False, cancel_futures=True)
        for cluster in (self.observed, self.output):
            if cluster is not None:
                cluster.stop()
        atexit.unregister(self.stop)


def stop_limit(s: Settings) -> float:
    """The largest per-client produce limit of a stop at that max mute (its start): the design's bound per client and
    broker, which the checker is given rather than computes (core/stop.py; docs/broker-side.md)."""
    from quota_pipeline.core.stop import StopLimit
    return StopLimit(max_mute_seconds=s.max_mute_s).enter_limit()


def quorum_leader(cluster: RealKafka) -> int:
    """The KRaft leader's node id, from kafka-metadata-quorum.sh (clients' DescribeCluster names any broker)."""
    env = {k: v for k, v in os.environ.items() if k != "CLASSPATH"}
    env.update(KAFKA_HEAP_OPTS="-Xmx64m", KAFKA_JVM_PERFORMANCE_OPTS=FAST_START_JVM,
               LOG_DIR=str(cluster.root / "tool-logs"))
    done = subprocess.run([str(cluster.home / "bin" / "kafka-metadata-quorum.sh"), "--bootstrap-server",
                           cluster.bootstrap(), "describe", "--status"], capture_output=True, text=True, timeout=90,
                          env=env)
    found = re.search(r"LeaderId:\s+(\d+)", done.stdout)
    if not found:
        raise RuntimeError(f"no LeaderId from kafka-metadata-quorum.sh: {done.stdout[-500:]}{done.stderr[-500:]}")
    return int(found.group(1))


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run_campaign(s: Settings, work: Path, log: Callable[[str], None] = print) -> tuple[cc.Report, Path]:
    """Start, inject, record, stop and check; everything is stopped whatever happens."""
    planned = list(s.faults) if s.faults is not None else schedule(
        s.seed, s.seconds, 3, s.interval_s, s.validity_s, s.output_on_observed, exclude=s.exclude, enforce=s.enforce)
    log(describe(s.seed, planned))
    campaign = Campaign(s, work, log)
    try:
        campaign.start()
        campaign.run(planned)
        history = campaign.finish()
    finally:
        campaign.stop()
    loaded, cluster = cc.load(history)
    report = cc.check(loaded, cluster)
    log(cc.render(report, loaded.meta))
    return report, history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True, help="the schedule's seed (the same seed replays it)")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the fault phase (default 5)")
    parser.add_argument("--interval", type=iso_duration, default=2.0, help="the job's check interval (PT2S)")
    parser.add_argument("--validity", type=iso_duration, default=20.0, help="decision validity (PT20S)")
    parser.add_argument("--output-on-observed", action="store_true",
                        help="put the decision topic on the observed cluster instead of a separate output broker")
    parser.add_argument("--enforce", action="store_true",
                        help="`quota-pipeline enforce` (client quotas) instead of the callback on the brokers")
    parser.add_argument("--refuse", action="store_true",
                        help="the brokers load the stop authorizer beside the callback: writes refused at factor 0 "
                        "(the checker then allows no acknowledged byte after the grace)")
    parser.add_argument("--max-mute", type=iso_duration, default=60.0,
                        help="quota.pipeline.throttle.max.mute of the brokers or enforce (PT60S, the default)")
    parser.add_argument("--work", type=Path, help="where the history and the job's files go (default: a temp dir)")
    parser.add_argument("--no-replay", action="store_true", help="skip `quota-pipeline replay` of the journal")
    parser.add_argument("--fault", action="append", default=[], metavar="KIND:TARGET@AT+HOLD",
                        help="a fixed schedule instead of the seeded one (repeat), e.g. fill_enospc:node1@5+30")
    parser.add_argument("--job-property", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra property of the job (e.g. a misconfiguration the checker must catch)")
    parser.add_argument("--exclude", action="append", default=[], metavar="KIND",
                        help="a fault kind the seeded schedule never draws (repeat)")
    parser.add_argument("--print-schedule", action="store_true", help="print the seed's schedule and exit")
    args = parser.parse_args(argv)
    try:
        faults = tuple(Planned.parse(f) for f in args.fault) or None
        props = tuple(tuple(p.split("=", 1)) for p in args.job_property)
        if any(len(p) != 2 for p in props):
            raise ValueError("--job-property takes KEY=VALUE")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = Settings(seed=args.seed, seconds=args.minutes * 60, interval_s=args.interval, validity_s=args.validity,
                 output_on_observed=args.output_on_observed, replay=not args.no_replay, faults=faults,
                 job_properties=props, exclude=tuple(args.exclude), enforce=args.enforce, max_mute_s=args.max_mute,
                 refuse=args.refuse)
    if args.refuse and args.enforce:
        print("error: --refuse loads the broker plugins and --enforce runs without them: give one", file=sys.stderr)
        return 2
    if args.print_schedule:
        print(describe(s.seed, list(faults) if faults else schedule(
            s.seed, s.seconds, 3, s.interval_s, s.validity_s, s.output_on_observed, exclude=s.exclude, enforce=s.enforce)))
        return 0
    if not os.environ.get("KAFKA_HOME"):
        print(f"error: {rk.ENABLE_HINT}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("error: the campaign mounts a tmpfs log dir per node: run it as root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    work = args.work or Path(tempfile.mkdtemp(prefix="campaign-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    report, history = run_campaign(s, work)
    print(f"history in {history}; {time.time() - started:.0f} s in all; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
