"""The observer against Apache Kafka from KAFKA_HOME: byte counts of every log dir, the partitions that fill them,
a stopped broker kept as fenced, and a log dir that really fills up (tmpfs, ENOSPC) pinning the throttle."""
from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quota_pipeline.core import config as cfg
from quota_pipeline.core.reference.decision import DecisionState, step
from quota_pipeline.core.model import PartitionSize, Status, VolumeSnapshot
from quota_pipeline.core.settings import Settings
from quota_pipeline.kafka.observer import Observer
from harness.kafka import RealKafka, partition_on, with_admin
from harness.kafka_props import pipeline_config, wait_for

MiB = 2 ** 20


def run_decisions(snapshots: list[VolumeSnapshot], conf: cfg.Config):
    """(summary, decision) of each snapshot, in order, as the streaming job's state machine gives them."""
    state = DecisionState()
    return [step(state, s, Settings.of(conf)) for s in snapshots]


def test_every_log_dir_is_reported_with_the_byte_counts_of_its_file_system(real_kafka: RealKafka):
    with Observer(pipeline_config(real_kafka)) as observer:
        snapshot = observer.poll()
    assert snapshot.status is Status.SUCCESS, snapshot.message
    assert (snapshot.brokers, snapshot.fenced_brokers) == ((1,), ())
    assert snapshot.cluster_id == with_admin(real_kafka, lambda a: a.describe_cluster())["cluster_id"]
    volumes = {v.log_dir: v for v in snapshot.volumes}
    assert set(volumes) == set(real_kafka.log_dirs[1])
    for log_dir, volume in volumes.items():
        fs = os.statvfs(log_dir)  # Kafka answers File.getTotalSpace / getUsableSpace: the same statvfs fields
        assert volume.broker_id == 1 and volume.error is None
        assert volume.total_bytes == fs.f_blocks * fs.f_frsize
        assert abs(volume.available_bytes - fs.f_bavail * fs.f_frsize) < max(256 * MiB, volume.total_bytes // 100)


def test_a_log_dir_names_the_partition_that_fills_it_with_its_size(real_kafka: RealKafka):
    topic = f"observed-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(real_kafka.client_config())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    try:
        producer = Producer({**real_kafka.client_config(), "linger.ms": 5})
        for _ in range(64):
            producer.produce(topic, value=os.urandom(16 * 1024))  # random: no compression can shrink it
        assert producer.flush(30) == 0
        written = 64 * 16 * 1024

        def listed() -> list[tuple[str, PartitionSize]]:
            with Observer(pipeline_config(real_kafka)) as observer:
                snapshot = observer.poll()
            return [(v.log_dir, p) for v in snapshot.volumes for p in v.top_partitions if p.topic == topic]

        [(log_dir, partition)] = wait_for(listed, 20, f"{topic} is among a log dir's top partitions")
        assert log_dir in real_kafka.log_dirs[1] and partition.partition == 0
        # The log holds the records plus batch headers: a little more than what was written, never less.
        assert written <= partition.size_bytes <= written * 1.05, partition
    finally:
        admin.delete_topics([topic])[topic].result(30)


def _poll_until(observer: Observer, accept, what: str, timeout: float = 30.0) -> VolumeSnapshot:
    return wait_for(lambda: (lambda s: s if accept(s) else None)(observer.poll()), timeout, what, every=0.5)


def test_a_stopped_broker_is_fenced_and_stays_expected_until_it_is_back(real_kafka3: RealKafka):
    if real_kafka3.version < (4, 0):
        pytest.skip("DescribeCluster reports fenced brokers from Kafka 4.0 (KIP-1073)")
    validity = 3.0
    pinned = pipeline_config(real_kafka3, **{cfg.VALIDITY: f"PT{validity:g}S"})
    expiring = pipeline_config(real_kafka3, **{cfg.VALIDITY: f"PT{validity:g}S", cfg.FENCED_POLICY: "expire"})
    fenced = lambda s: s.status is Status.SUCCESS and s.fenced_brokers == (3,)  # noqa: E731
    with Observer(pinned) as observer:
        snapshots = [observer.poll()]
        assert (snapshots[0].status, snapshots[0].brokers, snapshots[0].fenced_brokers) == \
            (Status.SUCCESS, (1, 2, 3), ())
        # Polled while the node shuts down, so that its last reading is taken just before it is fenced.
        stopping = threading.Thread(target=real_kafka3.stop_node, args=(3,))
        stopping.start()
        try:
            deadline = time.monotonic() + 30
            while not fenced(snapshots[-1]):
                assert time.monotonic() < deadline, f"broker 3 not reported fenced: {snapshots[-1]}"
                snapshots.append(observer.poll())
            stopping.join()
            # Then past the validity of broker 3's last reading, which expires unless it is pinned.
            time.sleep(validity + 0.5)
            snapshots.append(_poll_until(observer, fenced, "broker 3 is still reported fenced"))
        finally:
            stopping.join()
            real_kafka3.start_node(3)
        snapshots.append(_poll_until(observer, lambda s: s.status is Status.SUCCESS and s.brokers == (1, 2, 3)
                                     and 3 in {v.broker_id for v in s.volumes}, "broker 3 is back with its log dir"))
    first_fenced = next(i for i, s in enumerate(snapshots) if fenced(s))
    last_reading = max(i for i, s in enumerate(snapshots[:first_fenced]) if 3 in {v.broker_id for v in s.volumes})
    assert (snapshots[first_fenced].observed_at - snapshots[last_reading].observed_at).total_seconds() < validity
    down, back = snapshots[-2], snapshots[-1]
    assert (down.brokers, sorted({v.broker_id for v in down.volumes})) == ((1, 2), [1, 2])
    assert down.registered_brokers == {1, 2, 3} and back.fenced_brokers == ()
    # pin: the fenced broker's last reading stays in force past the validity: complete, it may release.
    (summary, _), (after, _) = run_decisions(snapshots, pinned)[-2:]
    assert (summary.missing_brokers, summary.complete, summary.active_log_dirs) == ((), True, 3)
    assert (after.missing_brokers, after.complete) == ((), True)
    # expire (Strimzi): the reading is gone, broker 3 is missing and nothing may release while it is down.
    (summary, _), (after, _) = run_decisions(snapshots, expiring)[-2:]
    assert (summary.missing_brokers, summary.complete) == ((3,), False)
    assert (after.missing_brokers, after.complete) == ((), True)


KAFKA_STORAGE_ERROR = "KAFKA_STORAGE_ERROR"


def test_a_log_dir_that_fills_up_goes_offline_and_pins_the_throttle_until_it_is_back(real_kafka_tmpfs: RealKafka):
    cluster = real_kafka_tmpfs
    tmpfs_dir = cluster.log_dirs[1][-1]
    validity = 2.0
    props = {cfg.HARD_BYTES: str(8 * MiB), cfg.VALIDITY: f"PT{validity:g}S"}
    pinned = pipeline_config(cluster, **props)
    last_known = pipeline_config(cluster, **props, **{cfg.OFFLINE_POLICY: "last-known"})
    # Space that is not Kafka's, to free after the disk is full (a file in a log dir is not a log: Kafka ignores it).
    ballast = os.path.join(tmpfs_dir, "ballast")
    with open(ballast, "wb") as out:
        out.write(bytes(24 * MiB))
    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic("fill", 4, 1)])["fill"].result(30)
    partition = partition_on(cluster, "fill", tmpfs_dir)
    snapshots: list[VolumeSnapshot] = []
    with Observer(pinned) as observer:
        snapshots.append(observer.poll())
        producer = Producer({**cluster.client_config(), "acks": 1, "linger.ms": 5, "message.timeout.ms": 5000})
        try:
            while not _tmpfs_volume(snapshots[-1], tmpfs_dir).offline:
                assert len(snapshots) < 120, [_tmpfs_volume(s, tmpfs_dir) for s in snapshots[-3:]]
                for _ in range(4):  # 1 MiB a step: a step cannot jump over the 8 MiB hard limit unseen
                    producer.produce("fill", value=bytes(256 * 1024), partition=partition)
                producer.flush(5)
                snapshots.append(observer.poll())
        finally:
            producer.purge()
            producer.flush(0)
        offline_at = len(snapshots) - 1
        deadline = snapshots[-1].observed_at.timestamp() + 2 * validity
        while snapshots[-1].observed_at.timestamp() < deadline:  # offline for longer than the validity
            time.sleep(0.5)
            snapshots.append(observer.poll())
    cluster.stop_node(1)
    os.remove(ballast)
    cluster.start_node(1)
    with Observer(pinned) as observer:
        snapshots.append(_poll_until(observer, lambda s: s.status is Status.SUCCESS
                                     and not _tmpfs_volume(s, tmpfs_dir).offline, "the log dir is back online"))

    assert all(s.status is Status.SUCCESS for s in snapshots), [s.message for s in snapshots]
    offline = _tmpfs_volume(snapshots[offline_at], tmpfs_dir)
    assert (offline.error, offline.total_bytes, offline.available_bytes) == (KAFKA_STORAGE_ERROR, None, None)
    assert all(_tmpfs_volume(s, tmpfs_dir).offline for s in snapshots[offline_at:-1])
    healthy = [v for v in snapshots[offline_at].volumes if v.log_dir != tmpfs_dir]
    assert len(healthy) == 1 and not healthy[0].offline, "only the full log dir goes offline"
    decisions = [(d.factor, d.source.value) for _, d in run_decisions(snapshots, pinned)]
    crossed = next(i for i, s in enumerate(snapshots) if _tmpfs_volume(s, tmpfs_dir).available_bytes is not None
                   and _tmpfs_volume(s, tmpfs_dir).available_bytes <= 8 * MiB)
    assert crossed < offline_at, "the hard limit was crossed before the log dir went offline"
    assert decisions[:crossed] == [(1.0, "OBSERVATION")] * crossed
    # Throttled from the crossing, through ENOSPC, for longer than the validity: the offline reading is pinned.
    assert decisions[crossed:-1] == [(0.0, "OBSERVATION")] * (len(snapshots) - 1 - crossed)
    assert decisions[-1] == (1.0, "OBSERVATION"), "space freed and the broker restarted: released"
    assert _tmpfs_volume(snapshots[-1], tmpfs_dir).available_bytes > 8 * MiB
    # last-known (Strimzi) lets the last reading expire while the dir is offline: it would release a full disk.
    assert (1.0, "OBSERVATION") in [(d.factor, d.source.value) for _, d in
                                    run_decisions(snapshots[:-1], last_known)][offline_at:]


def _tmpfs_volume(snapshot: VolumeSnapshot, log_dir: str):
    [volume] = [v for v in snapshot.volumes if v.log_dir == log_dir]
    return volume
