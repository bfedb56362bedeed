"""The enforcer on stock Kafka: throttle every client-quota entity, keep excluded principals free, restore exactly."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from quota_pipeline.core import config as cfg
from quota_pipeline.enforce.baseline import BaselineFile
from quota_pipeline.cli import build_parser, main
from quota_pipeline.commands import enforce as enforce_command
from quota_pipeline.enforce.plan import CATCH_ALL, FRESH_DEFAULT, Policy, diff, plan, scaled, tell_edits_from_lag, target
from quota_pipeline.enforce.enforcer import Enforcer
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE as PBR, UNLIMITED, Entity, Quotas, resolve
from quota_pipeline.simulator import Simulator
from quota_pipeline.simulator.quota_store import ClientQuotaStore
from tests.support.kafka_fixtures import broker  # noqa: F401 (a fixture)
from harness.kafka_client import create_topic, decision, encode, publish

POLICY = Policy.of(["User:pipeline"], 1000.0, produce_floor=1.0)  # Strimzi's floor: the small quotas stay scalable
USERS = ["alice", "bob", "carol", "dave", "pipeline", "stranger"]
WHOLE_CLIENT_LEVELS = ("user+client-id", "user+default client-id", "default user+client-id",
                       "default user+default client-id")
CLIENTS = ["app", "batch", "etl", "unknown"]

MIXED: Quotas = {
    Entity.of(default_user=True): {PBR: 4000.0, "consumer_byte_rate": 9000.0},
    Entity.of(default_client_id=True): {"request_percentage": 50.0},          # no produce quota here
    Entity.of(client_id="batch"): {PBR: 333.0},
    Entity.of("alice"): {PBR: 2000.0},
    Entity.of("bob"): {"consumer_byte_rate": 100.0},                           # user entity without produce
    Entity.of("alice", "app"): {PBR: 1001.0, "request_percentage": 10.0},
    Entity.of("carol", default_client_id=True): {PBR: 777.0},
    Entity.of(default_user=True, client_id="etl"): {PBR: 5.0},
    Entity.of("pipeline", "app"): {PBR: 123.0},                                # names the excluded user: kept
    Entity.of(ip="10.0.0.1"): {"connection_creation_rate": 5.0},
}


class Factor:
    def __init__(self, value: float = 1.0):
        self.value = value

    def current_factor(self, cluster: str | None = None) -> float:
        return self.value


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator({"brokers": 1}, port=0) as s:
        yield s


@pytest.fixture
def admin(sim: Simulator) -> Iterator[QuotaAdmin]:
    sim.state.client_quotas = ClientQuotaStore()
    with QuotaAdmin({"bootstrap.servers": sim.bootstrap_servers}) as a:
        yield a


def seed(sim: Simulator, quotas: Quotas) -> None:
    for entity, values in quotas.items():
        for key, value in values.items():
            sim.state.client_quotas.set(entity, key, value)


def expected_produce(before: Quotas, user: str, client: str, factor: float) -> float | None:
    """What the contract says a client's effective produce quota must be at `factor`."""
    base = resolve(before, user, client, PBR)
    if user in POLICY.excluded_users:
        return base.value if base.level in ("user+client-id", "user+default client-id", "user") else UNLIMITED
    if base.value is None:
        return scaled(POLICY.produce_base, factor) if POLICY.produce_base is not None else None
    return scaled(base.value, factor)


def make_enforcer(admin: QuotaAdmin, tmp_path: Path, factor: Factor, **kw) -> Enforcer:
    return Enforcer("c1", factor, admin, BaselineFile(tmp_path / "baseline.json"), kw.pop("policy", POLICY), **kw)


@pytest.mark.parametrize("lag", [0.0, 0.2], ids=["read-after-write", "describe-lags"])
def test_throttles_a_mixed_cluster_and_restores_every_entity_exactly(sim, admin, tmp_path, lag):
    seed(sim, MIXED)
    sim.state.client_quotas.visibility_lag = lag
    before = admin.describe()
    assert before == MIXED
    factor = Factor(0.5)
    enforcer = make_enforcer(admin, tmp_path, factor, settle_seconds=5)

    assert enforcer.step().action == "throttle"
    assert (tmp_path / "baseline.json").exists()
    until_visible(admin, enforcer, lag)
    throttled = admin.describe()
    for user in USERS:
        for client in CLIENTS:
            assert resolve(throttled, user, client, PBR).value == expected_produce(before, user, client, 0.5), (user, client)
    # Only producer_byte_rate moved; every other value is as the operator set it.
    for entity, values in before.items():
        assert {k: v for k, v in throttled[entity].items() if k != PBR} == {k: v for k, v in values.items() if k != PBR}
    assert throttled[Entity.of("pipeline")] == {PBR: UNLIMITED}
    assert throttled[Entity.of(ip="10.0.0.1")] == before[Entity.of(ip="10.0.0.1")]

    factor.value = 0.0  # a deeper throttle is computed from the baseline, not from the throttled values
    enforcer.step()
    until_visible(admin, enforcer, lag)
    stopped = admin.describe()
    for user in USERS:
        for client in CLIENTS:
            assert resolve(stopped, user, client, PBR).value == expected_produce(before, user, client, 0.0)
            # ... on a new quota window: a level whose sensor tags differ from the baseline's, unless the baseline
            # level names a user and a client id already (its tags cannot change).
            was, now = resolve(before, user, client, PBR).level, resolve(stopped, user, client, PBR).level
            if user not in POLICY.excluded_users and was not in WHOLE_CLIENT_LEVELS:
                assert now in ("user+default client-id", "default user+default client-id"), (user, client, was, now)

    factor.value = 1.0
    assert enforcer.step().action == "restore"
    deadline = time.monotonic() + 5
    while enforcer.step().action != "restored":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    after = admin.describe()
    assert diff(before, after) == []  # the acceptance: Describe before == Describe after
    assert not (tmp_path / "baseline.json").exists()
    assert enforcer.step().action == "idle"


def until_visible(admin: QuotaAdmin, enforcer: Enforcer, lag: float) -> None:
    deadline = time.monotonic() + 5
    while admin.describe() != enforcer.state.applied:
        assert time.monotonic() < deadline, "the cluster never showed what the enforcer wrote"
        assert enforcer.step().action in ("waiting", "idle")  # lag is not an operator edit: nothing re-planned
        time.sleep(0.05)


def test_operator_edits_while_throttled_become_the_baseline(sim, admin, tmp_path):
    seed(sim, MIXED)
    factor = Factor(0.5)
    enforcer = make_enforcer(admin, tmp_path, factor)
    enforcer.step()
    # The operator, unaware of the throttle: raises alice, adds dave, removes carol's quota, sets a consumer rate.
    admin.alter([Change(Entity.of("alice"), PBR, 8000.0), Change(Entity.of("dave"), PBR, 600.0),
                 Change(Entity.of("carol", default_client_id=True), PBR, None),
                 Change(Entity.of(client_id="batch"), "consumer_byte_rate", 42.0)])
    result = enforcer.step()
    assert sorted(map(str, result.operator_edits)) == sorted(map(str, [
        Change(Entity.of("alice"), PBR, 8000.0), Change(Entity.of("dave"), PBR, 600.0),
        Change(Entity.of("carol", default_client_id=True), PBR, None),
        Change(Entity.of(client_id="batch"), "consumer_byte_rate", 42.0)]))
    now = admin.describe()
    assert now[Entity.of("alice")][PBR] == 4000.0 and now[Entity.of("dave")][PBR] == 300.0  # scaled as baseline
    assert json.loads((tmp_path / "baseline.json").read_text())["baseline"]  # durable
    factor.value = 1.0
    enforcer.step()
    enforcer.step()
    restored = admin.describe()
    expected = {e: dict(v) for e, v in MIXED.items()}
    expected[Entity.of("alice")][PBR] = 8000.0
    expected[Entity.of("dave")] = {PBR: 600.0}
    del expected[Entity.of("carol", default_client_id=True)]
    expected[Entity.of(client_id="batch")]["consumer_byte_rate"] = 42.0
    assert restored == expected


def test_the_baseline_is_durable_before_the_first_change_and_a_restart_restores(sim, admin, tmp_path):
    seed(sim, MIXED)
    factor = Factor(0.25)
    make_enforcer(admin, tmp_path, factor).step()
    saved = json.loads((tmp_path / "baseline.json").read_text())
    assert saved["factor"] == 0.25 and saved["cluster"] == "c1"
    # A new process (the old one died) finds the record and restores from it.
    factor.value = 1.0
    restarted = make_enforcer(admin, tmp_path, factor)
    assert restarted.step().action == "restore"
    assert restarted.step().action == "restored"
    assert admin.describe() == MIXED


def test_a_crash_between_saving_and_altering_is_finished_after_a_restart(sim, admin, tmp_path):
    seed(sim, MIXED)

    class DiesOnAlter(QuotaAdmin):
        def alter(self, changes, validate_only=False):
            raise SystemExit("killed")

    dying = DiesOnAlter({"bootstrap.servers": sim.bootstrap_servers})
    with pytest.raises(SystemExit):
        make_enforcer(dying, tmp_path, Factor(0.5), settle_seconds=0).step()
    dying.close()
    assert admin.describe() == MIXED and (tmp_path / "baseline.json").exists()
    restarted = make_enforcer(admin, tmp_path, Factor(0.5), settle_seconds=0)
    result = restarted.step()
    assert result.operator_edits == [] and result.changes  # the unfinished write, not an operator edit
    assert admin.describe() == target(MIXED, 0.5, POLICY)


def test_a_refused_alter_is_sent_again(sim, admin, tmp_path):
    seed(sim, MIXED)
    real_alter = admin.alter
    calls = []

    def flaky(changes, validate_only=False):
        calls.append(len(changes))
        if len(calls) == 1:
            raise QuotaAdminError("simulated failure")
        real_alter(changes, validate_only)

    admin.alter = flaky  # type: ignore[method-assign]
    enforcer = make_enforcer(admin, tmp_path, Factor(0.5))
    with pytest.raises(QuotaAdminError):
        enforcer.step()
    enforcer.step()
    assert admin.describe() == target(MIXED, 0.5, POLICY)


def test_dry_run_changes_nothing_and_writes_no_baseline(sim, admin, tmp_path):
    seed(sim, MIXED)
    result = make_enforcer(admin, tmp_path, Factor(0.5), dry_run=True).step()
    assert result.action == "planned" and result.changes == plan(MIXED, MIXED, 0.5, POLICY)
    assert admin.describe() == MIXED
    assert not (tmp_path / "baseline.json").exists()


def test_factor_one_with_no_record_does_nothing(sim, admin, tmp_path):
    seed(sim, MIXED)
    assert make_enforcer(admin, tmp_path, Factor(1.0)).step().action == "idle"
    assert not (tmp_path / "baseline.json").exists()


# ---- the plan as a pure function ----------------------------------------------------------------

def test_unlimited_base_without_static_produce_quota():
    no_p = Policy.of([], None, produce_floor=1.0)
    assert target({}, 0.5, no_p) == {}  # unlimited x 0.5 stays unlimited (Strimzi: MAX x 0.5)
    assert target({}, 0.0, no_p) == {FRESH_DEFAULT: {PBR: 1.0}}  # Strimzi: max(1, MAX x 0) = 1 byte/s
    # The default stop limit (1 MiB muted at most PT60S: 1 MiB / 70 s), on the level above every client-id and user
    # default (a new window per client):
    assert target({}, 0.0, Policy.of([], None)) == {FRESH_DEFAULT: {PBR: 14979.0}}
    assert target({}, 1.0, POLICY) == {}
    assert target({}, 0.5, POLICY) == {CATCH_ALL: {PBR: 500.0}, Entity.of("pipeline"): {PBR: UNLIMITED}}


def test_scaled_values_are_whole_numbers_of_at_least_one():
    assert scaled(1001.0, 0.5) == 500.0
    assert scaled(3.0, 0.1) == 1.0
    assert scaled(UNLIMITED, 0.0) == 1.0


def test_scaled_values_keep_the_floor_and_the_floor_never_raises_a_quota():
    assert scaled(10_000_000.0, 0.0, 131072.0) == 131072.0
    assert scaled(10_000_000.0, 0.5, 131072.0) == 5_000_000.0
    assert scaled(50_000.0, 0.0, 131072.0) == 50_000.0


def test_an_existing_catch_all_produce_quota_is_scaled_not_replaced():
    base = {CATCH_ALL: {PBR: 800.0}}
    assert target(base, 0.5, Policy.of([], 1000.0, produce_floor=1.0))[CATCH_ALL] == {PBR: 400.0}


def test_tell_edits_from_lag_from_operator_edits():
    e = Entity.of("a")
    before, written = {e: {PBR: 1000.0}}, {e: {PBR: 500.0}}
    lagging = tell_edits_from_lag(before, written, [before])
    assert lagging.operator == [] and lagging.believed == written
    edited = tell_edits_from_lag({e: {PBR: 7.0}}, written, [before])
    assert edited.operator == [Change(e, PBR, 7.0)]
    assert tell_edits_from_lag(written, written, [before]).lagging == []


# ---- the command, end to end: a real decision topic, a simulated stock cluster -------------------

def test_enforce_command_follows_the_topic(broker, sim, admin, tmp_path, capsys):
    seed(sim, MIXED)
    topic = "decisions-enforce"
    create_topic(broker.bootstrap_servers, topic)
    props = tmp_path / "c.properties"
    props.write_text("\n".join([
        f"{cfg.BOOTSTRAP}={sim.bootstrap_servers}", f"{cfg.HARD_BYTES}=1000", f"{cfg.PRODUCE}=1000",
        f"{cfg.EXCLUDED}=User:pipeline", f"{cfg.OUTPUT_TOPIC}={topic}", f"{cfg.CLUSTER_NAME}=c1",
        f"{cfg.PRODUCE_FLOOR}=1",
        f"{cfg.OUTPUT_KAFKA_PREFIX}bootstrap.servers={broker.bootstrap_servers}",
        f"{cfg.CHECKPOINT_PATH}={tmp_path / 'ckpt'}"]))
    publish(broker.bootstrap_servers, topic, [(b"c1", encode(decision("c1", 0.5, observed_at=_now())))])
    assert main(["enforce", str(props), "--once", "--dry-run", "--stop", "throttle"]) == 0
    out = capsys.readouterr().out
    assert "planned change(s)" in out and "user=alice: set producer_byte_rate=1000" in out
    assert admin.describe() == MIXED

    assert main(["enforce", str(props), "--once", "--stop", "throttle"]) == 0
    assert "throttle" in capsys.readouterr().out
    assert admin.describe() == target(MIXED, 0.5, POLICY)  # no exemption by client id, the publisher's included
    assert (tmp_path / "ckpt" / "enforce" / "c1.json").exists()

    publish(broker.bootstrap_servers, topic, [(b"c1", encode(decision("c1", 1.0, observed_at=_now())))])
    result: dict[str, int] = {}
    stop = threading.Event()
    args = build_parser().parse_args(["enforce", str(props), "--interval", "0.1", "--stop", "throttle"])
    worker = threading.Thread(target=lambda: result.update(code=enforce_command.run(args, stop)), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while (tmp_path / "ckpt" / "enforce" / "c1.json").exists():
            assert time.monotonic() < deadline, capsys.readouterr()
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join(10)
    assert result == {"code": 0}
    assert admin.describe() == MIXED
    assert "restore" in capsys.readouterr().out


def _now():
    import datetime as dt
    t = dt.datetime.now(dt.timezone.utc)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


# ---- property: the target gives every client exactly the contract's produce quota ----------------

from hypothesis import given, settings, strategies as st  # noqa: E402

from quota_pipeline.kafka.client_quotas import LEVELS  # noqa: E402

_NAMES_U, _NAMES_C = ["alice", "bob", "pipeline"], ["app", "etl"]


@st.composite
def baselines(draw):
    quotas: Quotas = {}
    for _ in range(draw(st.integers(0, 8))):
        level = draw(st.sampled_from(LEVELS))
        entity = level.entity(draw(st.sampled_from(_NAMES_U)), draw(st.sampled_from(_NAMES_C)))
        values = quotas.setdefault(entity, {})
        if draw(st.booleans()):
            values[PBR] = float(draw(st.integers(1, 10**7)))
        else:
            values["consumer_byte_rate"] = float(draw(st.integers(1, 10**7)))
    return quotas


@settings(max_examples=300, deadline=None)
@given(baselines(), st.sampled_from([0.0, 0.01, 0.5, 0.999, 1.0]), st.sampled_from([None, 1.0, 5000.0]))
def test_every_client_gets_the_contracts_produce_quota(baseline, factor, produce):
    policy = Policy.of(["User:pipeline"], produce, produce_floor=1.0)
    wanted = target(baseline, factor, policy)
    for user in _NAMES_U + ["newcomer"]:
        for client in _NAMES_C + ["new-client"]:
            got = resolve(wanted, user, client, PBR).value
            base = resolve(baseline, user, client, PBR)
            if factor >= 1.0:
                assert got == base.value
            elif user == "pipeline":
                named = base.level in ("user+client-id", "user+default client-id", "user")
                assert got == (base.value if named else UNLIMITED)
            elif base.value is not None:
                assert got == scaled(base.value, factor)
            elif produce is not None:
                assert got == scaled(produce, factor)
            else:
                assert got == (1.0 if factor == 0.0 else None)
    # Restoring is exact: planning back to factor 1 from the throttled state gives the baseline.
    restored = {e: dict(v) for e, v in wanted.items()}
    for change in plan(baseline, wanted, 1.0, policy):
        if change.value is None:
            restored[change.entity].pop(change.key)
            if not restored[change.entity]:
                del restored[change.entity]
        else:
            restored.setdefault(change.entity, {})[change.key] = change.value
    assert restored == baseline


def test_the_baseline_file_round_trips_and_leaves_no_temporary_files(tmp_path):
    from quota_pipeline.enforce.baseline import BaselineError, EnforcerState
    store = BaselineFile(tmp_path / "sub" / "c1.json")
    state = EnforcerState("c1", MIXED, target(MIXED, 0.5, POLICY), 0.5, [(1.5, MIXED)])
    store.save(state)
    store.save(state)
    assert store.load() == state
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["c1.json"]
    (tmp_path / "sub" / "c1.json").write_text("{torn")
    with pytest.raises(BaselineError, match="not valid"):
        store.load()
    store.delete()
    assert store.load() is None


def test_no_client_id_is_exempt_not_even_the_publishers():
    # Any client can call itself quota-pipeline-publisher: a client id proves nothing, so none escapes a throttle.
    pub = "quota-pipeline-publisher"
    base = {Entity.of("alice"): {PBR: 5000.0}, Entity.of(client_id=pub): {PBR: 100.0}}
    policy = Policy.of([], 1000.0, produce_floor=1.0)
    for factor in (0.0, 0.5):
        out = target(base, factor, policy)
        assert [e for e in out if e.name("client-id") == pub] == [Entity.of(client_id=pub)]
        assert UNLIMITED not in {v.get(PBR) for v in out.values()}
        assert resolve(out, "anyone", pub, PBR).value == scaled(100.0, factor)
