"""Client quotas over the wire: the simulator's DescribeClientQuotas/AlterClientQuotas and `quotas` commands."""
from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest
from kafka.protocol.admin import DescribeClientQuotasRequest

from quota_pipeline.cli import main
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.client_quotas import LEVELS, PRODUCER_BYTE_RATE, UNLIMITED, Entity
from quota_pipeline.simulator import Simulator
from quota_pipeline.simulator.quota_store import ClientQuotaStore
from tests.support.simulator_fixtures import roundtrip


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator({"brokers": 2}, port=0) as s:
        yield s


@pytest.fixture
def admin(sim: Simulator) -> Iterator[QuotaAdmin]:
    sim.state.client_quotas = ClientQuotaStore()  # every test starts with no quotas
    with QuotaAdmin({"bootstrap.servers": sim.bootstrap_servers}) as a:
        yield a


def cli(capsys: pytest.CaptureFixture[str], sim: Simulator, *args: str) -> tuple[int, str, str]:
    code = main(["quotas", args[0], "--bootstrap-server", sim.bootstrap_servers, *args[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def explain_json(capsys: Any, sim: Simulator, user: str = "alice", client_id: str = "app") -> dict[str, Any]:
    code, out, err = cli(capsys, sim, "explain", "--user", user, "--client-id", client_id, "--json")
    assert code == 0, err
    return json.loads(out)


# Every level's entity for user=alice, client-id=app, with a value that names it (1001 = level 1, ...).
LEVEL_ENTITIES = [lv.entity("alice", "app") for lv in LEVELS]


@pytest.mark.parametrize("winner", range(8), ids=[lv.name for lv in LEVELS])
def test_explain_each_level_wins_over_every_level_below_it(admin, sim, capsys, winner):
    admin.alter([Change(e, PRODUCER_BYTE_RATE, 1001.0 + i) for i, e in enumerate(LEVEL_ENTITIES) if i >= winner])
    # Noise that must never apply to alice/app: other users and client-ids at every level.
    admin.alter([Change(lv.entity("bob", "other"), PRODUCER_BYTE_RATE, 7.0) for lv in LEVELS
                 if lv.user == "name" or lv.client_id == "name"])
    result = explain_json(capsys, sim)
    assert result["effective"][PRODUCER_BYTE_RATE] == {"value": 1001.0 + winner, "level": LEVELS[winner].name}
    assert [lv["level"] for lv in result["levels"]] == [lv.name for lv in LEVELS]
    for i, lv in enumerate(result["levels"]):
        assert lv["values"] == ({PRODUCER_BYTE_RATE: 1001.0 + i} if i >= winner else {})


@pytest.mark.parametrize("only", range(8), ids=[lv.name for lv in LEVELS])
def test_explain_each_level_alone_applies(admin, sim, capsys, only):
    admin.alter([Change(LEVEL_ENTITIES[only], PRODUCER_BYTE_RATE, 500.0)])
    result = explain_json(capsys, sim)
    assert result["effective"][PRODUCER_BYTE_RATE] == {"value": 500.0, "level": LEVELS[only].name}


def test_explain_resolves_each_key_on_its_own_and_unset_keys_are_unlimited(admin, sim, capsys):
    admin.alter([Change(Entity.of("alice", "app"), PRODUCER_BYTE_RATE, 1008.0),
                 Change(Entity.of(default_user=True), "consumer_byte_rate", 5000.0),
                 Change(Entity.of(client_id="app"), "request_percentage", 12.5)])
    eff = explain_json(capsys, sim)["effective"]
    assert eff == {
        "producer_byte_rate": {"value": 1008.0, "level": "user+client-id"},
        "consumer_byte_rate": {"value": 5000.0, "level": "default user"},
        "request_percentage": {"value": 12.5, "level": "client-id"},
        "controller_mutation_rate": {"value": None, "level": None},
    }


def test_explain_with_no_quotas_at_all(admin, sim, capsys):
    assert all(r == {"value": None, "level": None} for r in explain_json(capsys, sim)["effective"].values())


def test_explain_table_names_the_winning_level(admin, sim, capsys):
    admin.alter([Change(Entity.of("alice", default_client_id=True), PRODUCER_BYTE_RATE, 2048.0)])
    code, out, _ = cli(capsys, sim, "explain", "--user", "alice", "--client-id", "app")
    assert code == 0
    assert "2048" in out and "user+default client-id" in out and "wins" in out


def test_set_list_delete_through_the_cli(admin, sim, capsys):
    assert cli(capsys, sim, "set", "--user", "alice", "--client-id", "app", "--producer-byte-rate", "1008",
               "--consumer-byte-rate", "2000")[0] == 0
    assert cli(capsys, sim, "set", "--default-user", "--request-percentage", "12.5")[0] == 0
    assert cli(capsys, sim, "set", "--client-id", "batch", "--controller-mutation-rate", "3.5")[0] == 0
    assert cli(capsys, sim, "set", "--user", "bob", "--default-client-id", "--producer-byte-rate", "10")[0] == 0
    code, out, _ = cli(capsys, sim, "list", "--json")
    assert code == 0
    listed = {json.dumps(e["entity"], sort_keys=True): e["values"] for e in json.loads(out)["entities"]}
    assert listed == {
        '{"client-id": "app", "user": "alice"}': {"producer_byte_rate": 1008.0, "consumer_byte_rate": 2000.0,
                                                  "request_percentage": None, "controller_mutation_rate": None},
        '{"user": null}': {"producer_byte_rate": None, "consumer_byte_rate": None, "request_percentage": 12.5,
                           "controller_mutation_rate": None},
        '{"client-id": "batch"}': {"producer_byte_rate": None, "consumer_byte_rate": None,
                                   "request_percentage": None, "controller_mutation_rate": 3.5},
        '{"client-id": null, "user": "bob"}': {"producer_byte_rate": 10.0, "consumer_byte_rate": None,
                                               "request_percentage": None, "controller_mutation_rate": None},
    }
    code, out, _ = cli(capsys, sim, "list")
    assert code == 0 and "<default>" in out and "alice" in out
    assert cli(capsys, sim, "delete", "--user", "alice", "--client-id", "app", "--key", "consumer_byte_rate")[0] == 0
    assert admin.describe()[Entity.of("alice", "app")] == {PRODUCER_BYTE_RATE: 1008.0}
    assert cli(capsys, sim, "delete", "--default-user")[0] == 0
    assert Entity.of(default_user=True) not in admin.describe()


@pytest.mark.parametrize("args, message", [
    (["set", "--user", "a", "--producer-byte-rate", "1.5"], "cannot be a fractional value"),
    (["set", "--user", "a", "--producer-byte-rate", "0"], "must be greater than 0"),
    (["set", "--user", "a", "--consumer-byte-rate", "1e19"], "too large for a LONG"),
])
def test_the_cluster_refusal_is_one_error_line_and_exit_1(admin, sim, capsys, args, message):
    code, _, err = cli(capsys, sim, *args)
    assert code == 1
    assert message in err and err.startswith("error: AlterClientQuotas refused user=a")


@pytest.mark.parametrize("args", [
    ["set", "--producer-byte-rate", "1"],
    ["set", "--user", "a", "--default-user", "--producer-byte-rate", "1"],
    ["set", "--user", "a"],
    ["delete"],
])
def test_usage_errors_exit_2(admin, sim, capsys, args):
    with pytest.raises(SystemExit) as exc:
        cli(capsys, sim, *args)
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_quotas_without_a_cluster_says_what_to_give(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["quotas", "list"])
    assert exc.value.code == 2
    assert "--config" in capsys.readouterr().err


def test_unreachable_cluster_is_exit_1(capsys):
    code = main(["quotas", "list", "--bootstrap-server", "127.0.0.1:1", "--timeout", "0.5"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "127.0.0.1:1" in err


# ---- the simulator validates like Kafka's controller ---------------------------------------------

@pytest.mark.parametrize("entity, key, value, message", [
    (Entity.of("a"), "bogus_rate", 1.0, "Invalid configuration key bogus_rate"),
    (Entity.of("a"), "connection_creation_rate", 1.0, "Invalid configuration key"),
    (Entity.of(ip="10.0.0.1"), PRODUCER_BYTE_RATE, 1.0, "Invalid configuration key"),
    (Entity.from_mapping({"user": "a", "ip": "10.0.0.1"}), "connection_creation_rate", 1.0, "should"),
    (Entity.of(ip="not-an-ip"), "connection_creation_rate", 1.0, "not a valid IP"),
    (Entity.of(""), PRODUCER_BYTE_RATE, 1.0, "Empty user not supported"),
    (Entity(()), PRODUCER_BYTE_RATE, 1.0, "Invalid empty client quota entity"),
    (Entity.from_mapping({"group": "g"}), PRODUCER_BYTE_RATE, 1.0, "Unhandled client quota entity type"),
    (Entity.of(ip="10.0.0.1"), "connection_creation_rate", 2.0**31, "too large for an INT"),
    (Entity.of("a"), "request_percentage", -1.0, "must be greater than 0"),
])
def test_invalid_alterations_are_refused_per_entity(admin, entity, key, value, message):
    with pytest.raises(QuotaAdminError, match=message):
        admin.alter([Change(entity, key, value)])
    assert admin.describe() == {}


def test_a_refused_entity_does_not_stop_the_valid_ones(admin):
    with pytest.raises(QuotaAdminError, match="user=bad"):
        admin.alter([Change(Entity.of("good"), PRODUCER_BYTE_RATE, 10.0),
                     Change(Entity.of("bad"), PRODUCER_BYTE_RATE, 0.5)])
    assert admin.describe() == {Entity.of("good"): {PRODUCER_BYTE_RATE: 10.0}}


def test_double_values_and_kafkas_unlimited_are_accepted(admin):
    admin.alter([Change(Entity.of("a"), "request_percentage", 0.25),
                 Change(Entity.of("a"), PRODUCER_BYTE_RATE, UNLIMITED),
                 Change(Entity.of(ip="10.0.0.1"), "connection_creation_rate", 5.0),
                 Change(Entity.from_mapping({"ip": None}), "connection_creation_rate", 9.0)])
    assert admin.describe()[Entity.of("a")] == {"request_percentage": 0.25, PRODUCER_BYTE_RATE: UNLIMITED}


def test_removing_the_last_value_removes_the_entity_and_removing_nothing_is_fine(admin):
    admin.alter([Change(Entity.of("a"), PRODUCER_BYTE_RATE, 10.0)])
    admin.alter([Change(Entity.of("a"), PRODUCER_BYTE_RATE, None), Change(Entity.of("zz"), PRODUCER_BYTE_RATE, None)])
    assert admin.describe() == {}


def test_validate_only_changes_nothing(admin):
    admin.alter([Change(Entity.of("a"), PRODUCER_BYTE_RATE, 10.0)], validate_only=True)
    assert admin.describe() == {}


def _describe(sim: Simulator, components: list[tuple[str, int, str | None]], strict: bool, version: int = 1) -> Any:
    C = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest(components=[C(entity_type=t, match_type=m, match=n) for t, m, n in components],
                                          strict=strict)
    return roundtrip(sim.ports[1], request, version)


def _entities(response: Any) -> set[str]:
    return {str(Entity.from_mapping({c.entity_type: c.entity_name for c in e.entity})) for e in response.entries}


@pytest.mark.parametrize("version", [0, 1])
def test_describe_filters_match_like_kafka(admin, sim, version):
    for e in [Entity.of("alice"), Entity.of("alice", "app"), Entity.of(default_user=True),
              Entity.of(client_id="app"), Entity.of("bob", default_client_id=True)]:
        admin.alter([Change(e, PRODUCER_BYTE_RATE, 1.0)])
    assert _entities(_describe(sim, [("user", 0, "alice")], False, version)) == {"user=alice", "user=alice, client-id=app"}
    assert _entities(_describe(sim, [("user", 0, "alice")], True, version)) == {"user=alice"}
    assert _entities(_describe(sim, [("user", 1, None)], False, version)) == {"user=<default>"}
    assert _entities(_describe(sim, [("user", 2, None)], True, version)) == {"user=alice", "user=<default>"}
    assert _entities(_describe(sim, [("client-id", 2, None)], False, version)) == {
        "user=alice, client-id=app", "client-id=app", "user=bob, client-id=<default>"}
    assert _entities(_describe(sim, [("user", 2, None), ("client-id", 1, None)], True, version)) == {
        "user=bob, client-id=<default>"}
    assert len(_entities(_describe(sim, [], False, version))) == 5
    assert _describe(sim, [("user", 0, "a"), ("user", 1, None)], False, version).error_code == 42
    assert _describe(sim, [("ip", 2, None), ("user", 2, None)], False, version).error_code == 42
    assert _describe(sim, [("user", 7, None)], False, version).error_code == 42
    assert _describe(sim, [("group", 2, None)], False, version).error_code == 35


def test_describe_can_lag_behind_alter_like_kafka_4(admin, sim):
    sim.state.client_quotas.visibility_lag = 0.3
    admin.alter([Change(Entity.of("a"), PRODUCER_BYTE_RATE, 10.0)])
    assert admin.describe() == {}  # committed, not visible yet
    assert sim.state.client_quotas.snapshot() == {Entity.of("a"): {PRODUCER_BYTE_RATE: 10.0}}
    time.sleep(0.35)
    assert admin.describe() == {Entity.of("a"): {PRODUCER_BYTE_RATE: 10.0}}


def test_precedence_is_a_pure_function():
    from quota_pipeline.kafka.client_quotas import resolve
    quotas = {Entity.of(default_user=True): {PRODUCER_BYTE_RATE: 5.0}, Entity.of(client_id="x"): {PRODUCER_BYTE_RATE: 9.0}}
    assert resolve(quotas, "u", "x", PRODUCER_BYTE_RATE).level == "default user"
    assert resolve(quotas, "u", "x", "consumer_byte_rate").value is None
