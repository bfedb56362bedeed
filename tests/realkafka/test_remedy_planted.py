"""On real Apache Kafka (3 nodes): a remedy state file planted in the checkpoint directory, asking for retention.ms=1,
min.insync.replicas=1 and a partition shrunk to one replica, changes nothing on the cluster: `remedy --execute` and
`--abort` exit 1 with one line naming the file; the topic keeps the operator's retention and its three replicas."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import ConfigResource, ConfigResourceType

from harness.kafka import RealKafka, with_admin
from harness.kafka_props import pipeline_properties, wait_for, write_properties
from quota_pipeline.core import config as cfg
from quota_pipeline.remedy.throttles import INTRA_RATE

CLUSTER = "planted"
RATE = 10 * 2 ** 20
RETENTION = "86400000"


def move(topic: str, before: list[int], after: list[int], target: int) -> dict[str, Any]:
    return {"topic": topic, "partition": 0, "kind": "cross-broker", "size_bytes": 1, "growth_bytes_per_second": 0.0,
            "from": {"broker": 1, "log_dir": "/planted"}, "to": {"broker": target, "log_dir": "/planted"},
            "replicas_before": before, "replicas_after": after, "duration_seconds": 1.0, "why": "planted"}


def planted(topic: str, moves: list[dict[str, Any]], ours: list[dict[str, Any]]) -> dict[str, Any]:
    plan = {"format_version": 1, "cluster": CLUSTER, "throttle_bytes_per_second": RATE, "margin": "2%",
            "cordon": False, "moved_bytes": 1, "dirs": [], "moves": moves, "skipped": []}
    return {"format_version": 1, "started_at": time.time(), "plan": plan, "ours": ours}


def looks(cluster: RealKafka, topic: str) -> dict[str, Any]:
    """What a planted file must not change: the topic's retention.ms, its replicas, any reassignment of it, and
    broker 1's min.insync.replicas (value and source)."""
    def read(admin):
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": None}),
                                          ConfigResource(ConfigResourceType.BROKER, "1", {"min.insync.replicas": None})],
                                         config_filter="all")
        (meta,) = admin.describe_topics([topic])
        moving = admin.list_partition_reassignments()
        return configs, meta, moving
    configs, meta, moving = with_admin(cluster, read)
    retention = configs["topic"][topic]["retention.ms"]
    isr = configs["broker"]["1"]["min.insync.replicas"]
    return {"retention.ms": (retention.get("value"), str(retention.get("config_source"))),
            "replicas": [list(p["replica_nodes"]) for p in meta["partitions"]],
            "moving": sorted(str(tp) for tp in moving if tp.topic == topic),
            "broker 1 min.insync.replicas": (isr.get("value"), str(isr.get("config_source")))}


def test_a_planted_state_file_changes_nothing_and_is_refused_with_one_line(real_kafka3: RealKafka, tmp_path: Path):
    cluster = real_kafka3
    # The session's cluster may have had a node stopped and started again by another test of this worker.
    wait_for(lambda: len(with_admin(cluster, lambda a: [b for b in a.describe_cluster()["brokers"]
                                                        if not b.get("is_fenced")])) == 3, 60, "3 active brokers")
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(cluster.client_config())
    for f in admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]],
                                           config={"retention.ms": RETENTION})]).values():
        f.result(30)
    before = wait_for(lambda: (lambda s: s if s["replicas"] == [[1, 2, 3]] else None)(looks(cluster, topic)), 30,
                      f"{topic} is created on brokers 1-3")
    assert before["retention.ms"] == (RETENTION, "DYNAMIC_TOPIC_CONFIG")
    config = write_properties(tmp_path / "remedy.properties", pipeline_properties(
        cluster, **{cfg.CLUSTER_NAME: CLUSTER, cfg.CHECKPOINT_PATH: str(tmp_path / "checkpoint")}))
    state = tmp_path / "checkpoint" / "remedy" / f"{CLUSTER}.json"
    state.parent.mkdir(parents=True)
    files = {
        # As reported: retention.ms=1 on the topic, min.insync.replicas=1 on broker 1, the partition onto [2].
        "configs": (planted(topic, [move(topic, [1, 2, 3], [2], 2)], [
            {"kind": "topic", "name": topic, "key": "retention.ms", "value": "1", "entries": []},
            {"kind": "broker", "name": "1", "key": "min.insync.replicas", "value": "1", "entries": []}]),
            f"asks for retention.ms on topic {topic}, which remedy never sets"),
        # Only the move, with a throttle of the form remedy writes: the check against the cluster refuses it.
        "move": (planted(topic, [move(topic, [1, 2, 3], [2], 2)], [
            {"kind": "broker", "name": "2", "key": INTRA_RATE, "value": str(RATE), "entries": []}]),
            "from replicas [1, 2, 3] to [2], which changes its replication factor (3 now)"),
    }
    for name, (raw, message) in files.items():
        for flag in ("--execute", "--abort"):
            state.write_text(json.dumps(raw))
            run = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "remedy", str(config), "--sample", "0",
                                  flag, "--interval", "0.2"], capture_output=True, text=True, timeout=120)
            err = run.stderr
            assert run.returncode == 1, (name, flag, run.stdout, err)
            assert err.count("\n") == 1 and str(state) in err and message in err and "nothing was sent" in err, \
                (name, flag, err)
            assert "Traceback" not in err and "done:" not in run.stdout and "aborted" not in run.stdout
            assert looks(cluster, topic) == before, (name, flag)
            assert state.exists()
