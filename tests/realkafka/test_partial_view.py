"""A broker that does not answer hides no other broker's full disk, on real Kafka: with one node stopped (SIGSTOP,
as a hung broker or a kill -9 looks until the controller fences it) and node 1's tmpfs log dir past the hard limit,
the poll is a partial view (TIMEOUT, with the volumes of the nodes that answered) and the decision stops at once.

The real observer polls; each snapshot goes through the streaming job's processor (core/compiled/kernel.py), as the job
decides (tests/realkafka/test_offline_filling.py, decide); Spark itself is left out."""
from __future__ import annotations

import os
import signal
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from quota_pipeline.core import config as cfg
from quota_pipeline.core.model import Status, VolumeSnapshot
from quota_pipeline.kafka.observer import Observer
from tests.realkafka.test_offline_filling import decide
from harness.kafka import ClusterSpec, RealKafka
from tests.support.realkafka_fixtures import TMPFS_MB, _start
from harness.kafka_process import FAST_START_JVM, TmpfsUnavailable
from harness.kafka_props import pipeline_config, wait_for

MiB = 2 ** 20
HARD = 16 * MiB
SILENT = 3  # the node that stops answering


@pytest.fixture
def three_nodes_one_tmpfs() -> Iterator[RealKafka]:
    """Three nodes (broker+controller each: two voters stay when one stops), node 1's second log dir a 64 MiB
    tmpfs (root only)."""
    try:
        cluster = _start(ClusterSpec(nodes=3, log_dirs=2, tmpfs_mb=TMPFS_MB, jvm_opts=FAST_START_JVM))
    except TmpfsUnavailable as exc:
        pytest.skip(str(exc))
    yield cluster
    cluster.stop()


def tmpfs_volume(snapshot: VolumeSnapshot, tmpfs_dir: str):
    return next((v for v in snapshot.volumes if v.broker_id == 1 and v.log_dir == tmpfs_dir), None)


def test_a_full_dir_stops_the_cluster_at_once_while_another_broker_does_not_answer(
        three_nodes_one_tmpfs: RealKafka):
    cluster = three_nodes_one_tmpfs
    tmpfs_dir = cluster.log_dirs[1][-1]
    conf = pipeline_config(cluster, **{cfg.HARD_BYTES: str(HARD), cfg.CHECK_INTERVAL_ISO: "PT10S",
                                       cfg.VALIDITY: "PT1M"})
    # Partitions on node 1 only: Kafka spreads them over its two dirs, so the tmpfs holds some of "fill".
    admin = AdminClient(cluster.client_config())
    admin.create_topics([NewTopic("fill", 4, replica_assignment=[[1]] * 4)])["fill"].result(30)
    with Observer(conf) as observer:
        healthy = wait_for(lambda: (s := observer.poll()).status is Status.SUCCESS and len(s.brokers) == 3 and
                           "fill" in (tmpfs_volume(s, tmpfs_dir).topics or ()) and s, 30,
                           "a complete poll lists the topic on the tmpfs dir")
        with open(os.path.join(tmpfs_dir, "ballast"), "wb") as out:  # 8 MiB left: past the 16 MiB hard limit
            out.write(bytes((TMPFS_MB - 8) * MiB))
        process = cluster.nodes[SILENT].process
        os.killpg(process.pid, signal.SIGSTOP)
        try:
            seen = observer.poll()
        finally:
            os.killpg(process.pid, signal.SIGCONT)

    assert seen.status is not Status.SUCCESS and f"broker {SILENT}" in (seen.message or ""), seen
    records = decide([healthy, seen], conf)
    assert [(r["throttle_factor"], r["source"], r["missing_brokers"]) for r in records] == [
        (1.0, "OBSERVATION", []), (0.0, "OBSERVATION", [SILENT])], seen
    assert SILENT in seen.brokers and {v.broker_id for v in seen.volumes} == {1, 2}, seen
    assert tmpfs_volume(seen, tmpfs_dir).available_bytes <= HARD, seen
    assert records[1]["status"] == seen.status.value and records[1]["violations"] == 1
    assert records[1]["stop"] == {"scope": "topics", "topics": ["fill"]}
