"""`quota-pipeline remedy --execute` on real Apache Kafka whose log dir really fills with topic data, with the refusing
stop loaded on the brokers (StopAuthorizer).

The job is `quota-pipeline run` itself (Spark local[2]), deciding on the cluster it stops. A producer fills
the topic on node 1's 64 MiB tmpfs dir until the decision stops it (TOPIC_AUTHORIZATION_FAILED); `remedy` plans,
`--execute` is interrupted and run again, the moves the plan names are made, the dir goes back above its limit and
the job releases the stop by itself; every acknowledged record of the moved partitions is read back end to end and
no client saw an error other than the stop's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import kafka_config as rc
from harness.kafka import SELF_PLAINTEXT, ClusterSpec, RealKafka, start_cluster, with_admin
from harness.kafka_process import FAST_START_JVM, TmpfsUnavailable
from harness.kafka_props import pipeline_properties, wait_for, write_properties
from harness.stream_job import TopicWatcher, start_job as start_pipeline
from quota_pipeline.core import config as cfg
from tests.support.plugin_brokers import CALLBACK, callback_broker

MiB = 2 ** 20
TMPFS_MB = 64
HARD = 16 * MiB
CLUSTER = "remedy-test"
DECISIONS = "__quota_throttle_factors"
INTERVAL = "PT2S"
AUTHORIZER = "io.quotapipeline.callback.StopAuthorizer"
RECORD = 64 * 1024
PREFILL = 32 * MiB  # written at PREFILL_RATE: the tmpfs is still 16 MiB above the hard limit after it
PREFILL_RATE = 4 * MiB
FILL_RATE = 0.75 * MiB  # bytes/s: past the hard limit well before ENOSPC (the job decides every 2 s, later when loaded)
# Kafka deletes a moved replica's old copy log.segment.delete.delay.ms after the move (60 s by default; 2 s on these
# brokers, since how long Kafka waits is not what these tests are about); the rest is the job's next decisions.
DELETE_DELAY_MS = 2000
RELEASE_TIMEOUT = 90


@contextmanager
def stopping_cluster(jar: Path, nodes: int, log_dirs: int) -> Iterator[RealKafka]:
    """Nodes that load the refusing stop (allow.everyone: no ACLs needed) and follow the decision topic on the
    cluster itself; node 1's last log dir a 64 MiB tmpfs (root only)."""
    with callback_broker(jar, CALLBACK, {
            "authorizer.class.name": AUTHORIZER, "allow.everyone.if.no.acl.found": "true",
            "quota.pipeline.cluster.name": CLUSTER,
            # The controllers' votes come before the authorizer's first ACL load: a super user is let through
            # (the refusing stop refuses super users' writes like anyone's).
            "super.users": rc.BOOTSTRAP_ADMIN,
            "quota.pipeline.output.kafka.bootstrap.servers": SELF_PLAINTEXT,
            "quota.pipeline.output.topic.on.this.cluster": "true",
            "client.quota.callback.static.throttle.factor.validity.duration": "PT1M",
            "log.segment.delete.delay.ms": str(DELETE_DELAY_MS)},
            tmpfs_mb=TMPFS_MB, nodes=nodes, log_dirs=log_dirs) as cluster:
        yield cluster


class SparkJob:
    """The streaming job itself (`quota-pipeline run`, Spark local[2]) in a session of its own, and a watcher of the
    decision topic; `records` are this cluster's decisions so far."""

    def __init__(self, cluster: RealKafka, config: Path, work: Path) -> None:
        self.process = start_pipeline(config, work / "job.log", env={"JAVA_TOOL_OPTIONS": FAST_START_JVM})
        self.watcher = TopicWatcher(cluster.bootstrap(), DECISIONS)

    @property
    def records(self) -> list[dict[str, Any]]:
        return [r for _, r in self.watcher.records if r["cluster_id"] == CLUSTER]

    def factor(self) -> float | None:
        records = self.records
        return records[-1]["throttle_factor"] if records else None

    def stop(self, timeout: float) -> None:
        """SIGTERM to the job's process group (it stops after its running micro-batch), then the watcher."""
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout)
        self.watcher.close()


class Writer:
    """An acks=all producer; keeps every acknowledged record and every error, by code."""

    def __init__(self, cluster: RealKafka) -> None:
        # Not idempotent: a refused batch would leave a sequence gap; what is checked is that every acknowledged
        # record is read back, not their order.
        self.producer = Producer({**cluster.client_config(), "acks": "all", "enable.idempotence": False,
                                  "linger.ms": 5, "message.timeout.ms": 20000})
        self.acked: dict[tuple[str, int, int], bytes] = {}
        self.errors: list[str] = []
        self.details: list[str] = []

    def send(self, topic: str, partition: int, value: bytes) -> None:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                self.acked[msg.topic(), msg.partition(), msg.offset()] = msg.value()
            else:
                self.errors.append(err.name())
                self.details.append(f"{time.strftime('%H:%M:%S')} {msg.topic()}-{msg.partition()} {err.str()}")
        while True:
            try:
                self.producer.produce(topic, value=value, partition=partition, on_delivery=done)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def flush(self) -> None:
        self.producer.flush(30)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if e != "TOPIC_AUTHORIZATION_FAILED"]


def read_back(cluster: RealKafka, topic: str, partitions: list[int]) -> dict[tuple[str, int, int], bytes]:
    """Every record of the partitions from offset 0 to their end (assign, no group)."""
    consumer = Consumer({**cluster.client_config(), "group.id": "remedy-check", "enable.auto.commit": False,
                         "fetch.max.bytes": 8 * MiB})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: dict[tuple[str, int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while any(sum(1 for k in out if k[1] == p) < ends[p] for p in partitions) and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            out[msg.topic(), msg.partition(), msg.offset()] = msg.value()
    consumer.close()
    return out


def remedy(config: Path, *args: str, **popen: Any) -> subprocess.Popen:
    return subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "quota_pipeline.cli", "remedy", str(config),
                             "--sample", "4", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def dirs_of(cluster: RealKafka, topic: str) -> dict[tuple[int, int], str]:
    """(partition, broker) -> log dir of each replica of `topic` (future replicas left out)."""
    found = with_admin(cluster, lambda a: a.describe_log_dirs())
    return {(p["partition_index"], b["broker"]): d["log_dir"] for b in found for d in b["log_dirs"]
            for t in d["topics"] if t["name"] == topic for p in t["partitions"] if not p.get("is_future_key")}


def setup_topics(cluster: RealKafka, fill_where: dict[int, list[int]], keep_dir: dict[int, str],
                 tmpfs: str, decisions_on: list[int]) -> None:
    """The decision topic (on `decisions_on`, in `keep_dir`) and `fill` (its replicas as given), `fill` moved onto
    node 1's tmpfs while empty."""
    admin = AdminClient(cluster.client_config())
    for f in admin.create_topics([NewTopic(DECISIONS, 1, replica_assignment=[decisions_on],
                                           config={"cleanup.policy": "compact"}),
                                  NewTopic("fill", len(fill_where),
                                           replica_assignment=[fill_where[p] for p in sorted(fill_where)])]).values():
        f.result(30)
    wait_for(lambda: len(dirs_of(cluster, "fill")) == sum(map(len, fill_where.values())), 30, "fill is placed")
    moves = {("fill", p, 1): tmpfs for p, bs in fill_where.items() if 1 in bs}
    moves.update({(DECISIONS, 0, b): d for b, d in keep_dir.items() if b in decisions_on})
    with_admin(cluster, lambda a: a.alter_replica_log_dirs(moves))
    wait_for(lambda: all(dirs_of(cluster, "fill").get((p, 1)) == tmpfs for p, bs in fill_where.items() if 1 in bs),
             30, "fill's replicas on node 1 are on the tmpfs")


def fill_until_stopped(cluster: RealKafka, job: SparkJob, writer: Writer, partitions: list[int]) -> None:
    """Write to `fill` until the job stops it and the brokers refuse the writes."""
    payload = iter(range(10 ** 9))
    started = time.monotonic()
    deadline = started + 300
    total = 0
    while time.monotonic() < deadline:
        for p in partitions:
            writer.send("fill", p, f"{next(payload):08d}".encode() + os.urandom(RECORD - 8))
        sent = len(partitions) * RECORD
        total += sent
        time.sleep(sent / (PREFILL_RATE if total < PREFILL else FILL_RATE))
        if job.factor() == 0.0:
            writer.flush()
            if "TOPIC_AUTHORIZATION_FAILED" in writer.errors:
                return
            time.sleep(0.5)
    raise AssertionError(f"no stop within 300 s: factor {job.factor()}, errors {set(writer.errors)}")


def start_job(cluster: RealKafka, tmp_path: Path) -> tuple[Path, SparkJob]:
    """The pipeline's configuration for `cluster` (written where remedy reads it) and the job deciding on it, started."""
    props = pipeline_properties(cluster, **{cfg.HARD_BYTES: str(HARD), cfg.CHECK_INTERVAL_ISO: INTERVAL,
                                            cfg.VALIDITY: "PT1M", cfg.CLUSTER_NAME: CLUSTER,
                                            cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint")})
    config = write_properties(tmp_path / "remedy.properties", props)
    return config, SparkJob(cluster, config, tmp_path)


def test_an_intra_broker_plan_moves_the_filling_partitions_and_the_job_releases_the_stop(
        callback_jar, tmp_path):  # noqa: F811
    with stopping_cluster(callback_jar, nodes=1, log_dirs=2) as cluster:
        disk, tmpfs = cluster.log_dirs[1]
        setup_topics(cluster, {0: [1], 1: [1], 2: [1]}, {1: disk}, tmpfs, decisions_on=[1])
        config, job = start_job(cluster, tmp_path)
        writer = Writer(cluster)
        try:
            wait_for(lambda: job.records, 300, "the job's first decision")
            fill_until_stopped(cluster, job, writer, [0, 1, 2])
            # The topics on the full dir: `fill`, and __consumer_offsets when a consumer group made it (the follower).
            assert job.records[-1]["stop"]["scope"] == "topics" and "fill" in job.records[-1]["stop"]["topics"]

            shown = remedy(config, "--json", "--margin", "4MiB")
            out, err = shown.communicate(timeout=120)
            assert shown.returncode == 0, err
            plan = json.loads(out)
            named = {(m["topic"], m["partition"]) for m in plan["moves"]}
            assert named and all(m["kind"] == "intra-broker" and m["to"]["log_dir"] == disk for m in plan["moves"])

            # Interrupted as soon as its first move has started (slow: 1 MiB/s, so none can be done by then), then run
            # again: it resumes and cleans up.
            first = remedy(config, "--execute", "--margin", "4MiB", "--throttle", "1MiB", "--interval", "0.5")
            said = started_moving(first, 60)
            assert (tmp_path / "checkpoint" / "remedy" / f"{CLUSTER}.json").exists(), said
            first.send_signal(signal.SIGINT)
            rest, err = first.communicate(timeout=60)
            assert first.returncode == 130 and "run `quota-pipeline remedy --execute` again" in err, said + rest + err
            second = remedy(config, "--execute", "--margin", "4MiB", "--interval", "0.5")
            out, err = second.communicate(timeout=300)
            assert second.returncode == 0 and "resuming the plan" in out and "done:" in out, out + err
            print(out)  # shown with -s: what an operator sees

            placed = dirs_of(cluster, "fill")
            assert all(placed[p, 1] == disk for _, p in named)
            wait_for(lambda: job.factor() == 1.0, RELEASE_TIMEOUT, "the job releases the stop")
            after = [v for v in job.records[-1].get("closest_volumes") or [] if v["log_dir"] == tmpfs]
            assert not after or after[0]["available_bytes"] > HARD
            assert writes_go_through(writer, [0, 1, 2])
            assert writer.unexpected() == [], set(writer.errors)
        finally:
            job.stop(60)
        back = read_back(cluster, "fill", [0, 1, 2])
        assert {k: v for k, v in writer.acked.items()}.items() <= back.items()
        assert not throttles_left(cluster)


def started_moving(process: subprocess.Popen, timeout: float) -> str:
    """`remedy --execute`'s output up to its first "started <topic>-<partition>" line (its moves are issued)."""
    said: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        said.append(line)
        if line.startswith("started "):
            return "".join(said)
    raise AssertionError(f"remedy --execute started no move within {timeout:.0f} s: {''.join(said)}")


def writes_go_through(writer: Writer, partitions: list[int]) -> bool:
    """Once the brokers follow the release, a record to each partition is acknowledged."""
    def attempt() -> bool:
        before = len(writer.acked)
        for p in partitions:
            writer.send("fill", p, b"after the release")
        writer.flush()
        return len(writer.acked) - before == len(partitions)
    return wait_for(attempt, 30, "writes to fill are acknowledged again", every=1)


def throttles_left(cluster: RealKafka) -> dict[str, Any]:
    """Every throttle config still set on a broker or on `fill` (none once remedy has cleaned up)."""
    from kafka.admin import ConfigResource, ConfigResourceType
    asked = [ConfigResource(ConfigResourceType.BROKER, str(b)) for b in cluster.node_ids]
    asked.append(ConfigResource(ConfigResourceType.TOPIC, "fill"))
    found = with_admin(cluster, lambda a: a.describe_configs(asked))
    return {f"{kind} {name}: {key}": v.get("value") for kind, by_name in found.items() for name, keys in by_name.items()
            for key, v in keys.items() if "throttled" in key or "alter.log.dirs" in key or "cordoned" in key}


def jmx_rate(cluster: RealKafka, port: int, mbean: str) -> float:
    """A replication quota's byte-rate (bytes/s over its window) on one broker, read with Kafka's JmxTool."""
    from tests.support.plugin_brokers import jmx_value
    return jmx_value(cluster, port, mbean, "byte-rate")


@pytest.fixture
def jmx_ports(monkeypatch) -> dict[int, int]:
    """A JMX port per node (JMX_PORT is one environment for every node the harness starts)."""
    from harness.kafka import free_ports
    from harness.kafka_process import NodeProcess
    ports = dict(zip((1, 2), free_ports(2)))
    plain = NodeProcess.env
    monkeypatch.setattr(NodeProcess, "env", lambda self, jvm_opts=None: {
        **plain(self, jvm_opts), "JMX_PORT": str(ports[self.layout.node_id])})
    return ports


def test_a_cross_broker_plan_moves_under_a_replication_throttle_the_brokers_metrics_show(
        callback_jar, tmp_path, jmx_ports):  # noqa: F811
    """Node 1's only log dir is the tmpfs: the partitions go to node 2, throttled at THROTTLE."""
    throttle = 1 * MiB
    with stopping_cluster(callback_jar, nodes=2, log_dirs=1) as cluster:
        (tmpfs,), (disk,) = cluster.log_dirs[1], cluster.log_dirs[2]
        setup_topics(cluster, {0: [1], 1: [1]}, {2: disk}, tmpfs, decisions_on=[2])
        config, job = start_job(cluster, tmp_path)
        writer = Writer(cluster)
        try:
            wait_for(lambda: job.records, 300, "the job's first decision")
            fill_until_stopped(cluster, job, writer, [0, 1])
            print(time.strftime('%H:%M:%S'), "stopped")
            run = remedy(config, "--execute", "--margin", "4MiB", "--throttle", f"{throttle}", "--interval", "0.5")
            wait_for(lambda: throttles_left(cluster).get(f"broker 2: {'follower.replication.throttled.rate'}")
                     == str(throttle), 60, "the follower throttle is set on broker 2")
            time.sleep(4)  # a few seconds of copying in the quota's window
            follower = jmx_rate(cluster, jmx_ports[2], "kafka.server:type=FollowerReplication")
            leader = jmx_rate(cluster, jmx_ports[1], "kafka.server:type=LeaderReplication")
            out, err = run.communicate(timeout=300)
            assert run.returncode == 0 and "done:" in out, out + err
            print(out, f"follower byte-rate {follower:.0f} B/s, leader byte-rate {leader:.0f} B/s")
            assert 0 < follower <= 1.5 * throttle and 0 < leader <= 1.5 * throttle, (follower, leader)
            moved = [line for line in out.splitlines() if line.startswith("started fill-")]
            assert moved and all("-> broker 2" in line for line in moved), out
            placed = dirs_of(cluster, "fill")
            assert all((int(line.split()[1].split("-")[1].rstrip(":")), 2) in placed for line in moved), placed
            print(time.strftime('%H:%M:%S'), "remedy done")
            wait_for(lambda: job.factor() == 1.0, RELEASE_TIMEOUT, "the job releases the stop")
            print(time.strftime('%H:%M:%S'), "released")
            assert writes_go_through(writer, [0, 1])
            assert writer.unexpected() == [], [d for d in writer.details if "uthoriz" not in d]
        finally:
            job.stop(60)
        back = read_back(cluster, "fill", [0, 1])
        assert writer.acked.items() <= back.items()
        assert not throttles_left(cluster)


@pytest.mark.parametrize("version", ["4.3.0"])
def test_on_kafka_with_cordons_the_source_dir_is_cordoned_while_the_plan_runs_and_uncordoned_after(tmp_path, version):
    """KIP-1066 (Kafka 4.3 and later, assembled from Maven Central): while remedy moves partitions off the tmpfs
    dir, `cordoned.log.dirs` of broker 1 names it; once done it is gone. No stop plugin is needed here: the topic is
    filled past the limit directly."""
    from harness.kafka import kafka_home
    from harness.kafka_dist import AssemblyFailed, assemble
    try:
        home = assemble(version, kafka_home())
    except AssemblyFailed as exc:
        pytest.skip(str(exc))
    try:
        cluster = start_cluster(ClusterSpec(nodes=1, log_dirs=2, tmpfs_mb=TMPFS_MB, jvm_opts=FAST_START_JVM), home=home)
    except TmpfsUnavailable as exc:
        pytest.skip(str(exc))
    try:
        disk, tmpfs = cluster.log_dirs[1]
        setup_topics(cluster, {0: [1], 1: [1]}, {1: disk}, tmpfs, decisions_on=[1])
        writer = Writer(cluster)
        while (avail := tmpfs_available(cluster, tmpfs)) > HARD - 2 * MiB:
            for _ in range(8):  # 1 MiB a round, then a look at the dir
                for p in (0, 1):
                    writer.send("fill", p, os.urandom(RECORD))
            writer.flush()
        props = pipeline_properties(cluster, **{cfg.HARD_BYTES: str(HARD), cfg.CLUSTER_NAME: CLUSTER,
                                                cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint")})
        config = write_properties(tmp_path / "remedy.properties", props)
        run = remedy(config, "--execute", "--margin", "4MiB", "--throttle", "2MiB", "--interval", "0.5")
        cordoned = wait_for(lambda: throttles_left(cluster).get("broker 1: cordoned.log.dirs"), 60,
                            f"broker 1 cordons {tmpfs}")
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0 and "done:" in out, out + err
        assert cordoned == tmpfs and "cordon" in out, out
        assert not throttles_left(cluster), throttles_left(cluster)
        assert any(d == disk for (_, b), d in dirs_of(cluster, "fill").items()), avail
    finally:
        cluster.stop()


def tmpfs_available(cluster: RealKafka, tmpfs: str) -> int:
    [broker] = with_admin(cluster, lambda a: a.describe_log_dirs())
    return next(d["usable_bytes"] for d in broker["log_dirs"] if d["log_dir"] == tmpfs)
