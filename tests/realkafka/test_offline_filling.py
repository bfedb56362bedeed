"""An offline log dir on a real broker at PT10S: one that filled from above the hard limit to ENOSPC between two
polls throttles at the next poll; one that failed while steady (a write error, not a full disk) does not.

The real observer polls every 10 s; each snapshot goes through the streaming job's processor (core/compiled/kernel.py, its
state carried in an in-memory state store between micro-batches), as the job decides; Spark itself is left out."""
from __future__ import annotations

import json
import os
import time
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import VolumeSnapshot
from quota_pipeline.core.settings import Settings
from quota_pipeline.kafka.observer import Observer
from quota_pipeline.streaming import source
from quota_pipeline.streaming.processor import DecisionProcessor
from tests.support.builders import MemoryHandle
from tests.support.builders import spark_rows as _rows
from harness.kafka import ClusterSpec, RealKafka, partition_on
from tests.support.realkafka_fixtures import TMPFS_MB, _start
from harness.kafka_process import FAST_START_JVM, TmpfsUnavailable
from harness.kafka_props import pipeline_config

MiB = 2 ** 20
INTERVAL = 10.0
HARD = 8 * MiB
STEP = 12 * MiB  # filled per interval: 1.2 MiB/s, so 16 MiB left at the last reading reach 8 MiB 7 s later


@pytest.fixture
def three_dirs() -> Iterator[RealKafka]:
    """One node with three log dirs: one that stays online (with none left, Kafka stops the broker), one that
    will fail while steady and a 64 MiB one that fills up, both a tmpfs of their own (root only): nothing but the
    broker writes to them, so the steady one's free bytes are the broker's alone."""
    try:
        cluster = _start(ClusterSpec(nodes=1, log_dirs=3, tmpfs_mb=TMPFS_MB, tmpfs_dirs=2, jvm_opts=FAST_START_JVM))
    except TmpfsUnavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()


def decide(snapshots: list[VolumeSnapshot], conf: cfg.Config) -> list[dict]:
    """The records the streaming job's processor publishes for these snapshots, one micro-batch per poll."""
    processor = DecisionProcessor({"real": Settings.of(conf)}, {"real": "real"})
    processor.init(MemoryHandle())
    records = []
    for tick, snap in enumerate(snapshots):
        for out in processor.handleInputRows((snap.cluster_id,), iter(_rows(source.snapshot_rows("real", tick, snap))),
                                             None):
            records.append(json.loads(out.value))
    return records


def fill(cluster: RealKafka, partition: int, size: int) -> None:
    """Append `size` bytes to `partition` (random: nothing compresses them); failures past ENOSPC are expected."""
    producer = Producer({**cluster.client_config(), "acks": 1, "linger.ms": 5, "message.timeout.ms": 5000,
                         "enable.idempotence": False})
    try:
        for _ in range(size // (256 * 1024)):
            producer.produce("fill", value=os.urandom(256 * 1024), partition=partition)
            producer.poll(0)
        producer.flush(8)
    except (BufferError, KafkaException):
        pass
    finally:
        producer.purge()
        producer.flush(0)


def volume(snapshot: VolumeSnapshot, log_dir: str):
    [v] = [v for v in snapshot.volumes if v.log_dir == log_dir]
    return v


def test_a_dir_that_filled_to_enospc_between_polls_throttles_and_one_that_failed_steady_does_not(
        three_dirs: RealKafka):
    cluster = three_dirs
    _, steady_dir, tmpfs_dir = cluster.log_dirs[1]
    conf = pipeline_config(cluster, **{cfg.HARD_BYTES: str(HARD), cfg.CHECK_INTERVAL_ISO: "PT10S",
                                       cfg.VALIDITY: "PT1M"})
    with open(os.path.join(tmpfs_dir, "ballast"), "wb") as out:  # 40 MiB left of the 64 MiB tmpfs
        out.write(bytes(24 * MiB))
    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic("fill", 6, 1)])["fill"].result(30)
    on_tmpfs = partition_on(cluster, "fill", tmpfs_dir)
    partition_on(cluster, "fill", steady_dir)  # so that the broker writes checkpoints into the steady dir
    snapshots: list[VolumeSnapshot] = []
    with Observer(conf) as observer:
        started = time.monotonic()

        def poll() -> None:
            time.sleep(max(0.0, started + INTERVAL * len(snapshots) - time.monotonic()))
            snapshots.append(observer.poll())

        poll()
        fill(cluster, on_tmpfs, STEP)
        poll()
        # The steady dir fails by a write error: Kafka writes its high-watermark checkpoint (every 5 s) through
        # a .tmp file, and a directory in its place makes that write fail (EISDIR) without any disk filling up.
        os.mkdir(os.path.join(steady_dir, "replication-offset-checkpoint.tmp"))
        fill(cluster, on_tmpfs, STEP)
        poll()
        # Past the hard limit and on to ENOSPC with no poll in between.
        fill(cluster, on_tmpfs, 40 * MiB)
        poll()

    readings = [volume(s, tmpfs_dir).available_bytes for s in snapshots]
    assert all(r is not None and r > HARD for r in readings[:3]), readings       # never seen at the limit
    assert volume(snapshots[3], tmpfs_dir).error == "KAFKA_STORAGE_ERROR", readings   # then full: offline
    steady = [volume(s, steady_dir) for s in snapshots]
    assert not steady[1].offline and steady[2].offline and steady[3].offline, steady
    # Steady: on its own tmpfs it moved by the broker's few checkpoint bytes at most, so at that rate it stays above
    # the limit for ten intervals, five times the two it is extrapolated over. (On the machine's shared disk, other
    # tests' writes moved it by gigabytes in one interval.)
    moved = abs(steady[1].available_bytes - steady[0].available_bytes)
    assert moved < MiB and steady[1].available_bytes - HARD > 10 * MiB, steady

    records = decide(snapshots, conf)
    assert [(r["throttle_factor"], r["source"]) for r in records] == [(1.0, "OBSERVATION")] * 3 + [
        (0.0, "OBSERVATION")]
    # The steady dir went offline at the third poll and did not throttle; it keeps its last reading.
    at_failure = {(c["log_dir"]): c for c in records[2]["closest_volumes"]}
    assert (at_failure[steady_dir]["available_bytes"], at_failure[steady_dir]["reason"]) == (
        steady[1].available_bytes, None)
    assert records[2]["violations"] == 0
    # The full one: violating, listed as offline after filling, at its last fill rate, ETA 0.
    [full] = [c for c in records[3]["closest_volumes"] if c["log_dir"] == tmpfs_dir]
    assert (full["reason"], full["eta_seconds"], full["available_bytes"]) == ("offline-filling", 0.0, None)
    assert full["fill_rate_bytes_per_second"] > 0.9 * MiB
    assert records[3]["violations"] == 1 and records[3]["worst_volume"]["log_dir"] == tmpfs_dir
    # Strimzi's rule (last-known) throttles neither: the full dir's last reading was healthy.
    last_known = pipeline_config(cluster, **{cfg.HARD_BYTES: str(HARD), cfg.CHECK_INTERVAL_ISO: "PT10S",
                                             cfg.VALIDITY: "PT1M", cfg.OFFLINE_POLICY: "last-known"})
    assert [r["throttle_factor"] for r in decide(snapshots, last_known)] == [1.0] * 4
