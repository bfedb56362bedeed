"""The cluster simulator: scenarios, simulated time, wire fidelity with kafka-python and librdkafka, the CLI."""
from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.protocol.admin import DescribeClusterRequest, DescribeLogDirsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from quota_pipeline.simulator import ScenarioError, SimClock, Simulator, load_scenario
from quota_pipeline.simulator.protocol import CURRENT_VERSIONS, OLD_VERSIONS
from tests.support.simulator_fixtures import free_port_block, port_is_free, roundtrip, start_simulator  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


# ---- scenarios ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted((ROOT / "conf" / "scenarios").glob("*.*")), ids=lambda p: p.name)
def test_example_scenarios_load(path):
    scenario = load_scenario(path)
    assert scenario.brokers


@pytest.mark.parametrize("raw, field", [
    ({"brokers": [{"log_dirs": [{"path": "/a", "total_bytes": "lots"}]}]}, "brokers/0/log_dirs/0/total_bytes"),
    ({"brokers": 2, "faults": [{"type": "slow"}]}, "faults/0"),
    ({"brokers": 2, "faults": [{"type": "melt", "broker": 1}]}, "faults/0/type"),
    ({"brokers": 2, "faults": [{"type": "broker_down", "broker": 7}]}, "faults/0"),
    ({"brokers": 2, "speed": 0}, "speed"),
    ({"brokers": 2, "colour": "red"}, "(top level)"),
    ({"brokers": [{"log_dirs": [{"path": "/a", "used_bytes": 10, "total_bytes": 5}]}]}, "brokers/0/log_dirs/0"),
])
def test_invalid_scenario_names_the_field(raw, field):
    with pytest.raises(ScenarioError, match=re.escape(f": {field}:")):
        load_scenario(raw)


def test_yaml_file_and_sizes(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("cluster_id: c9\nbrokers:\n  - id: 7\n    log_dirs:\n      - {path: /d, total_bytes: 2GiB, "
                    "available_bytes: 1GiB, fill_rate: 1MiB}\n")
    s = load_scenario(path)
    d = s.brokers[0].log_dirs[0]
    assert (s.cluster_id, s.brokers[0].broker_id, d.total_bytes, d.used_bytes, d.fill_rate) == \
        ("c9", 7, 2 * 2**30, 2**30, 2**20)


def test_clock_speed_and_advance():
    clock = SimClock(speed=60)
    time.sleep(0.05)
    assert 2.5 < clock.now() < 6
    clock.advance(100)
    assert clock.now() > 100
    clock.set_speed(1)
    t = clock.now()
    time.sleep(0.05)
    assert 0.04 < clock.now() - t < 0.5


def test_fill_drain_timeline_and_clamp(start_simulator):
    sim = start_simulator({"brokers": [{"log_dirs": [
        {"path": "/fill", "total_bytes": 1000, "used_bytes": 100, "fill_rate": 10},
        {"path": "/drain", "total_bytes": 1000, "used_bytes": 500, "fill_rate": -10},
        {"path": "/line", "total_bytes": 1000, "timeline": [{"at": 10, "used_bytes": 0}, {"at": 20, "available_bytes": 0}]},
    ]}]})
    sim.clock.advance(15)
    v = sim.state.volumes()[1]
    assert 740 <= v["/fill"][1] <= 750 and 640 <= v["/drain"][1] <= 650 and 495 <= v["/line"][1] <= 500
    sim.clock.advance(100)
    v = sim.state.volumes()[1]
    assert v["/fill"][1] == 0 and v["/drain"][1] == 1000 and v["/line"][1] == 0  # clamped to [0, total]
    sim.state.set_available(1, "/fill", 400)
    assert 395 <= sim.state.volumes()[1]["/fill"][1] <= 400


# ---- wire fidelity --------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, CURRENT_VERSIONS[18][1] + 1))
def test_api_versions_every_version(start_simulator, version):
    sim = start_simulator({"brokers": 1})
    r = roundtrip(sim.base_port, ApiVersionsRequest(client_software_name="t", client_software_version="1"), version)
    assert r.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in r.api_keys} == CURRENT_VERSIONS


@pytest.mark.parametrize("version", range(0, CURRENT_VERSIONS[3][1] + 1))
def test_metadata_every_version(start_simulator, version):
    sim = start_simulator({"brokers": 3, "cluster_id": "meta"})
    r = roundtrip(sim.base_port + 1, MetadataRequest(topics=None if version else []), version)
    assert sorted((b.node_id, b.port) for b in r.brokers) == sorted((i, p) for i, p in sim.ports.items())
    if version >= 2:
        assert r.cluster_id == "meta"


@pytest.mark.parametrize("version", range(0, CURRENT_VERSIONS[60][1] + 1))
def test_describe_cluster_every_version_and_fenced_brokers(start_simulator, version):
    sim = start_simulator({"brokers": 3, "faults": [{"type": "broker_fenced", "broker": 2}]})
    r = roundtrip(sim.base_port, DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                        include_fenced_brokers=True), version)
    listed = {b.broker_id: b.is_fenced for b in r.brokers}
    assert listed == ({1: False, 2: True, 3: False} if version >= 2 else {1: False, 3: False})


@pytest.mark.parametrize("version", range(1, CURRENT_VERSIONS[35][1] + 1))
def test_describe_log_dirs_every_version(start_simulator, version):
    sim = start_simulator({"brokers": 1, "log_dirs": 3, "defaults": {"total_bytes": 5000, "used_bytes": 1000}})
    r = roundtrip(sim.base_port, DescribeLogDirsRequest(topics=None), version)
    assert [x.log_dir for x in r.results] == [f"/var/lib/kafka/data-{i}" for i in range(3)]
    expected = (5000, 4000) if version >= 4 else (-1, -1)  # KIP-827 fields exist from v4
    assert {(x.total_bytes, x.usable_bytes) for x in r.results} == {expected}


def test_each_describe_log_dirs_answers_the_readings_of_its_moment(start_simulator):
    """The simulator reuses its results between requests: a second answer still says what changed in between (a
    fill, a dir gone offline), and in the version asked."""
    sim = start_simulator({"brokers": 1, "log_dirs": 2, "defaults": {"total_bytes": 5000, "used_bytes": 1000}})
    first = roundtrip(sim.base_port, DescribeLogDirsRequest(topics=None), 4)
    sim.state.set_available(1, 0, 700)
    sim.state.log_dir(1, 1).offline = True
    second = roundtrip(sim.base_port, DescribeLogDirsRequest(topics=None), 4)
    old = roundtrip(sim.base_port, DescribeLogDirsRequest(topics=None), 3)
    assert [(x.error_code, x.usable_bytes) for x in first.results] == [(0, 4000), (0, 4000)]
    assert [(x.error_code, x.usable_bytes) for x in second.results] == [(0, 700), (56, -1)]
    assert {(x.total_bytes, x.usable_bytes) for x in old.results} == {(-1, -1)}


def test_a_dir_that_goes_offline_when_full_does_so_without_being_asked():
    """A log dir set to go offline when full is taken offline by the simulator's own reconcile, as Kafka takes a
    full dir offline whether or not anyone describes it."""
    sim = Simulator({"brokers": 1, "log_dirs": 2, "defaults": {"total_bytes": 1000, "used_bytes": 900,
                                                                 "fill_rate": 10, "offline_when_full": True}})
    sim.clock.advance(20)
    sim._reconcile()
    assert sim.state.log_dir(1, 0).offline and sim.state.log_dir(1, 1).offline
    assert sim.state.volumes()[1] == {"/var/lib/kafka/data-0": None, "/var/lib/kafka/data-1": None}


def test_old_broker_advertises_pre_kip_827_versions(start_simulator):
    sim = start_simulator({"brokers": 2, "faults": [{"type": "old_protocol", "broker": 2}]})
    r = roundtrip(sim.base_port + 1, ApiVersionsRequest(), 0)
    assert {k.api_key: (k.min_version, k.max_version) for k in r.api_keys} == OLD_VERSIONS
    r = roundtrip(sim.base_port + 1, DescribeLogDirsRequest(topics=[]), 4)
    assert r.error_code == 35  # UNSUPPORTED_VERSION


def test_unsimulated_api_answers_unsupported_version(start_simulator):
    from kafka.protocol.consumer import FetchRequest
    sim = start_simulator({"brokers": 1})
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[])
    assert roundtrip(sim.base_port, req, 12).error_code == 35
    assert sim.counts.totals()["other"] == 1


def test_kafka_python_admin_client_decodes_everything(start_simulator):
    from kafka.admin import KafkaAdminClient
    sim = start_simulator({"brokers": 3, "log_dirs": 2, "cluster_id": "kp"})
    admin = KafkaAdminClient(bootstrap_servers=sim.bootstrap_servers, request_timeout_ms=5000)
    try:
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"] == "kp" and len(cluster["brokers"]) == 3
        dirs = admin.describe_log_dirs()
        assert sorted(d["broker"] for d in dirs) == [1, 2, 3]
        assert all(ld["total_bytes"] == 10**12 for d in dirs for ld in d["log_dirs"])
    finally:
        admin.close()


def test_confluent_kafka_describe_cluster_lists_brokers(start_simulator):
    from confluent_kafka.admin import AdminClient
    sim = start_simulator({"brokers": 4, "cluster_id": "ck", "faults": [{"type": "broker_fenced", "broker": 4}]})
    admin = AdminClient({"bootstrap.servers": sim.bootstrap_servers, "log_level": 0})
    result = admin.describe_cluster(include_authorized_operations=False, request_timeout=10).result(timeout=15)
    assert result.cluster_id == "ck"
    assert sorted((n.id, n.port) for n in result.nodes) == [(i, sim.ports[i]) for i in (1, 2, 3)]
    metadata = admin.list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3] and metadata.cluster_id == "ck"
    # librdkafka implements describe_cluster with Metadata (high, flexible versions), not DescribeCluster.
    assert sim.counts.totals()["Metadata"] >= 2


# ---- runtime control ------------------------------------------------------------------------------

def test_broker_down_refuses_connections_and_comes_back(start_simulator):
    sim = start_simulator({"brokers": 2})
    port = sim.ports[2]
    roundtrip(port, ApiVersionsRequest(), 0)  # a served connection leaves TIME_WAIT behind when dropped
    sim.state.broker_down(2)
    time.sleep(0.2)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    sim.state.broker_up(2)
    time.sleep(0.2)
    assert roundtrip(port, ApiVersionsRequest(), 0).error_code == 0


def test_request_counts_per_api_and_broker(start_simulator):
    sim = start_simulator({"brokers": 2})
    roundtrip(sim.base_port, ApiVersionsRequest(), 0)
    roundtrip(sim.base_port + 1, DescribeLogDirsRequest(topics=[]), 4)
    assert sim.counts.totals() == {"ApiVersions": 1, "DescribeLogDirs": 1}
    assert sim.counts.by_broker() == {1: {"ApiVersions": 1}, 2: {"DescribeLogDirs": 1}}
    sim.counts.reset()
    assert sim.counts.totals() == {}


def test_stop_leaves_no_listener():
    sim = Simulator({"brokers": 3}, port=0).start()
    ports = list(sim.ports.values())
    sim.stop()
    assert all(port_is_free(p) for p in ports)


def test_port_in_use_is_a_clear_error():
    base = free_port_block(3)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", base + 1))
        blocker.listen()
        with pytest.raises(OSError, match=f"port {base + 1} is in use"):
            Simulator({"brokers": 3}, port=base).start()
    assert port_is_free(base)  # the listener opened before the clash is closed again


# ---- command line ---------------------------------------------------------------------------------

def _start_cli(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "simulate", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("bootstrap.servers="):
            return proc
    proc.wait(5)
    raise AssertionError(f"simulate did not start: {proc.stderr.read()}")  # type: ignore[union-attr]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_stops_cleanly_on_signal(sig):
    base = free_port_block(6)
    proc = _start_cli("--brokers", "6", "--log-dirs", "2", "--port", str(base))
    try:
        out = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "observe", "--bootstrap-server",
                              f"127.0.0.1:{base}"], capture_output=True, text=True, timeout=30)
        snapshot = json.loads(out.stdout)
        assert out.returncode == 0 and snapshot["status"] == "SUCCESS" and len(snapshot["volumes"]) == 12
        assert all(v["used_bytes"] is not None and v["available_ratio"] is not None for v in snapshot["volumes"])
    finally:
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "DescribeLogDirs=6" in rest
    assert all(port_is_free(p) for p in range(base, base + 6))


def test_cli_port_in_use_exits_1():
    base = free_port_block(2)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", base))
        blocker.listen()
        out = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "simulate", "--brokers", "2",
                              "--port", str(base)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert out.stderr.startswith(f"error: port {base} is in use")


def test_cli_scenario_end_after(tmp_path):
    path = tmp_path / "short.json"
    path.write_text(json.dumps({"brokers": 2, "end_after": 30, "speed": 60, "port": 0}))
    out = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "simulate", "--scenario", str(path)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "stopped; all listeners closed" in out.stdout


def test_cli_bad_scenario_exits_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("brokers: 0\n")
    out = subprocess.run([sys.executable, "-m", "quota_pipeline.cli", "simulate", "--scenario", str(path)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "brokers" in out.stderr
