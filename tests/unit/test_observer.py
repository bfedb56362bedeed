"""The observer against the simulator: every fault maps to the snapshot status of DESIGN.md."""
from __future__ import annotations

import logging
import os
import time

import pytest

from quota_pipeline.kafka.settings import to_kafka_python
from quota_pipeline.core.model import Status
from quota_pipeline.core.snapshot_rules import parse_snapshot
from quota_pipeline.kafka.observer import Observer, call_timeout_ms, poll_once
from tests.support.simulator_fixtures import free_port_block, make_config, start_simulator  # noqa: F401  (fixture)

SIX_BY_TWO = {"brokers": 6, "log_dirs": 2, "cluster_id": "sim-obs"}


def poll(sim, interval: str = "PT10S", **extra: str) -> VolumeSnapshot:
    with Observer(make_config(sim.bootstrap_servers, interval, **extra)) as obs:
        return obs.poll()


def with_fault(fault: dict, **scenario) -> dict:
    return {**SIX_BY_TWO, **scenario, "faults": [fault]}


def test_healthy_cluster_reports_every_volume(start_simulator):
    sim = start_simulator(SIX_BY_TWO)
    snap = poll(sim)
    assert snap.status is Status.SUCCESS, snap.message
    assert snap.cluster_id == "sim-obs"
    assert snap.brokers == (1, 2, 3, 4, 5, 6) and snap.fenced_brokers == ()
    assert len(snap.volumes) == 12
    truth = sim.state.volumes()
    for v in snap.volumes:
        assert (v.total_bytes, v.available_bytes) == truth[v.broker_id][v.log_dir]
        assert v.used_bytes == v.total_bytes - v.available_bytes and v.available_ratio == pytest.approx(0.75)
    assert snap.observed_at.microsecond % 1000 == 0
    assert parse_snapshot(snap.to_json()) == snap


def test_module_level_observe_and_cluster_name_is_only_the_output_key(start_simulator):
    sim = start_simulator(SIX_BY_TWO)
    from quota_pipeline.core import config as cfg
    conf = cfg.parse({cfg.BOOTSTRAP: sim.bootstrap_servers, cfg.HARD_BYTES: "1", cfg.CLUSTER_NAME: "prod"})
    snap = poll_once(conf)
    assert snap.status is Status.SUCCESS and snap.cluster_id == "sim-obs"


def test_connection_is_reused_across_polls_and_log_dirs_are_asked_once_per_broker(start_simulator):
    sim = start_simulator(SIX_BY_TWO)
    with Observer(make_config(sim.bootstrap_servers)) as obs:
        assert obs.poll().status is Status.SUCCESS
        before = sim.counts.totals()
        for _ in range(3):
            assert obs.poll().status is Status.SUCCESS
        after = sim.counts.totals()
    assert after["ApiVersions"] == before["ApiVersions"]  # no new connections
    assert after["DescribeLogDirs"] - before["DescribeLogDirs"] == 3 * 6
    assert after["DescribeCluster"] - before["DescribeCluster"] == 3


def test_log_dirs_are_requested_concurrently(start_simulator):
    sim = start_simulator(with_fault({"type": "slow", "delay_ms": 400, "apis": ["DescribeLogDirs"]}))
    with Observer(make_config(sim.bootstrap_servers)) as obs:
        obs.poll()  # connect first
        t0 = time.monotonic()
        snap = obs.poll()
        elapsed = time.monotonic() - t0
    assert snap.status is Status.SUCCESS
    assert elapsed < 1.2, f"6 brokers x 0.4 s took {elapsed:.2f} s: not parallel"


def test_broker_down_is_a_log_dirs_error_until_fenced(start_simulator):
    sim = start_simulator(with_fault({"type": "broker_down", "broker": 2, "fence_after": 60}))
    with Observer(make_config(sim.bootstrap_servers)) as obs:
        snap = obs.poll()
        assert snap.status is Status.DESCRIBE_LOG_DIRS_ERROR
        # A partial view: the volumes of the brokers that answered, broker 2 listed and without any.
        assert "broker 2" in snap.message and 2 in snap.brokers
        assert {v.broker_id for v in snap.volumes} == {1, 3, 4, 5, 6} and len(snap.volumes) == 10
        assert parse_snapshot(snap.to_json()) == snap  # journaled as it is
        sim.clock.advance(61)  # the cluster fences the dead broker
        snap = obs.poll()
        assert snap.status is Status.SUCCESS, snap.message
        assert snap.fenced_brokers == (2,) and 2 not in snap.brokers
        assert {v.broker_id for v in snap.volumes} == {1, 3, 4, 5, 6}
        sim.state.broker_up(2)
        time.sleep(0.2)
        deadline = time.monotonic() + 5
        while (snap := obs.poll()).status is not Status.SUCCESS or 2 not in snap.brokers:
            assert time.monotonic() < deadline, f"broker 2 never came back: {snap}"
            time.sleep(0.2)
        assert len(snap.volumes) == 12  # reconnected after the failure


def test_fenced_broker_is_listed_and_not_asked(start_simulator):
    sim = start_simulator(with_fault({"type": "broker_fenced", "broker": 4}))
    snap = poll(sim)
    assert snap.status is Status.SUCCESS
    assert snap.brokers == (1, 2, 3, 5, 6) and snap.fenced_brokers == (4,)
    assert sim.counts.by_broker().get(4, {}).get("DescribeLogDirs", 0) == 0


@pytest.mark.parametrize("api", ["DescribeLogDirs", "DescribeCluster"])
def test_slow_broker_gives_timeout_below_the_check_interval(start_simulator, api):
    fault = {"type": "slow", "delay_ms": 3000, "apis": [api]}
    if api == "DescribeLogDirs":
        fault["broker"] = 3
    sim = start_simulator(with_fault(fault))
    conf = make_config(sim.bootstrap_servers, "PT1S")
    assert call_timeout_ms(conf) == 800
    t0 = time.monotonic()
    with Observer(conf) as obs:
        snap = obs.poll()
    assert snap.status is Status.TIMEOUT, snap
    assert time.monotonic() - t0 < 2.5
    if api == "DescribeLogDirs":  # the brokers that did answer are not blamed, and their volumes are kept
        assert "broker 3" in snap.message and "broker 4" not in snap.message
        assert {v.broker_id for v in snap.volumes} == {1, 2, 4, 5, 6}


def test_a_broker_that_hangs_on_describe_cluster_leaves_time_to_ask_another(start_simulator):
    """A hung broker (stopped, a hung network thread) asked for DescribeCluster gets a third of the poll, not all of
    it: the other broker answers and both are asked for their log dirs. Polled until broker 1 was the one asked
    first (the client picks at random)."""
    sim = start_simulator({"brokers": 2, "log_dirs": 2, "cluster_id": "sim-obs",
                           "faults": [{"type": "slow", "delay_ms": 3000, "apis": ["DescribeCluster"], "broker": 1}]})
    conf = make_config(sim.bootstrap_servers, "PT3S")
    for _ in range(20):
        t0 = time.monotonic()
        with Observer(conf) as obs:
            snap = obs.poll()
        assert snap.status is Status.SUCCESS and len(snap.volumes) == 4, snap
        assert time.monotonic() - t0 < 2.5
        if sim.counts.by_broker().get(1, {}).get("DescribeCluster", 0):
            break
    assert sim.counts.by_broker()[1].get("DescribeCluster", 0) == 1, sim.counts.by_broker()


def test_offline_log_dir_has_error_and_no_bytes(start_simulator):
    sim = start_simulator(with_fault({"type": "log_dir_offline", "broker": 5, "log_dir": "/var/lib/kafka/data-1"}))
    snap = poll(sim)
    assert snap.status is Status.SUCCESS
    offline = [v for v in snap.volumes if v.error]
    assert [(v.broker_id, v.log_dir, v.error) for v in offline] == [(5, "/var/lib/kafka/data-1", "KAFKA_STORAGE_ERROR")]
    record = offline[0].to_json()
    assert record["total_bytes"] is None and record["available_bytes"] is None


def test_full_disk_goes_offline_like_enospc(start_simulator):
    sim = start_simulator({"brokers": 2, "defaults": {"total_bytes": "1GB", "used_ratio": 0.5, "offline_when_full": True}})
    assert poll(sim).status is Status.SUCCESS
    sim.state.fill(1, 0, 10**9)  # more than is left
    snap = poll(sim)
    assert [v.error for v in snap.volumes if v.broker_id == 1] == ["KAFKA_STORAGE_ERROR"]
    sim.state.fill(1, 0, -(10**9))  # freeing space does not bring an ENOSPC log dir back by itself
    assert [v.error for v in poll(sim).volumes if v.broker_id == 1] == ["KAFKA_STORAGE_ERROR"]


def test_filling_disk_is_seen(start_simulator):
    sim = start_simulator({"brokers": 1, "defaults": {"total_bytes": 1000, "used_bytes": 0, "fill_rate": 10}})
    sim.clock.advance(30)
    v = poll(sim).volumes[0]
    assert 690 <= v.available_bytes <= 700


@pytest.mark.parametrize("fault, why", [
    ({"type": "old_protocol", "broker": 3}, "DescribeLogDirs v3"),
    ({"type": "no_byte_counts", "broker": 3}, "no volume byte counts"),
])
def test_broker_without_kip_827_is_unsupported(start_simulator, fault, why):
    sim = start_simulator(with_fault(fault))
    snap = poll(sim)
    assert snap.status is Status.UNSUPPORTED_BROKER
    assert "broker 3" in snap.message and "Kafka >= 3.3" in snap.message and why in snap.message
    assert {v.broker_id for v in snap.volumes} == {1, 2, 4, 5, 6}  # the others' volumes: a partial view


def test_broker_omitted_from_log_dirs_is_success_with_a_gap(start_simulator):
    sim = start_simulator(with_fault({"type": "omit_log_dirs", "broker": 6}))
    snap = poll(sim)
    assert snap.status is Status.SUCCESS and 6 in snap.brokers
    assert {v.broker_id for v in snap.volumes} == {1, 2, 3, 4, 5}  # decide sees broker 6 uncovered


def test_log_dirs_error_code(start_simulator):
    sim = start_simulator(with_fault({"type": "log_dirs_error", "broker": 2}))
    snap = poll(sim)
    assert snap.status is Status.DESCRIBE_LOG_DIRS_ERROR
    assert "broker 2" in snap.message and "CLUSTER_AUTHORIZATION_FAILED" in snap.message


def test_describe_cluster_error(start_simulator):
    sim = start_simulator(with_fault({"type": "describe_cluster_error", "error_code": 31}))
    snap = poll(sim)
    assert snap.status is Status.DESCRIBE_CLUSTER_ERROR and "CLUSTER_AUTHORIZATION_FAILED" in snap.message


def test_malformed_response_is_error(start_simulator):
    sim = start_simulator(with_fault({"type": "corrupt", "broker": 2, "apis": ["DescribeLogDirs"]}))
    snap = poll(sim)
    assert snap.status is Status.ERROR and "broker 2" in snap.message


def test_unreachable_cluster_never_raises():
    port = free_port_block(1)
    t0 = time.monotonic()
    snap = poll(type("S", (), {"bootstrap_servers": f"127.0.0.1:{port}"}), "PT1S")
    assert snap.status is Status.DESCRIBE_CLUSTER_ERROR and "bootstrap" in snap.message
    assert snap.cluster_id == f"127.0.0.1:{port}"
    assert time.monotonic() - t0 < 3


def test_real_directory_free_space(start_simulator, tmp_path):
    sim = start_simulator({"brokers": [{"log_dirs": [{"path": "/data", "statvfs": str(tmp_path)}]}]})
    v = poll(sim).volumes[0]
    st = os.statvfs(tmp_path)
    assert v.total_bytes == st.f_blocks * st.f_frsize
    assert abs(v.available_bytes - st.f_bavail * st.f_frsize) < 64 * 2**20


def test_admin_settings_are_mapped_and_secrets_never_logged(caplog):
    settings = to_kafka_python({
        "bootstrap.servers": "a:9092,b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="s3cret";',
        "ssl.truststore.location": "/etc/ca.pem", "ssl.truststore.type": "PEM", "client.id": "qp",
        "request.timeout.ms": "5000", "ssl.endpoint.identification.algorithm": "", "some.unknown": "s3cret",
    })
    kw = settings.kwargs
    assert kw["bootstrap_servers"] == ["a:9092", "b:9092"] and kw["security_protocol"] == "SASL_SSL"
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("alice", "s3cret")
    assert kw["ssl_cafile"] == "/etc/ca.pem" and kw["ssl_check_hostname"] is False and kw["client_id"] == "qp"
    assert settings.ignored == ["some.unknown"]
    with caplog.at_level(logging.WARNING):
        Observer(make_config("127.0.0.1:1", some_unknown="s3cret"))
    assert "some.unknown" in caplog.text and "s3cret" not in caplog.text
