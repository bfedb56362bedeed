"""The refusing stop on stock Kafka, without a cluster: which topics a stop covers, which bindings to create or
delete from the scope and the state file, an operator's binding never touched, and the write-ahead order with an
admin that can be "killed" between recording a binding and creating it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import pytest

from quota_pipeline.enforce.baseline import BaselineError, BaselineFile
from quota_pipeline.enforce.enforcer import Enforcer
from quota_pipeline.enforce.plan import Policy
from quota_pipeline.reader.write_refusal import CLUSTER_SCOPE, StopScope
from quota_pipeline.core.model import CLUSTER_STOP, Stop
from quota_pipeline.core.record import stop_from_json
from quota_pipeline.core.exemption import INTERNAL_TOPICS, StopExemption
from quota_pipeline.enforce.refuse import (
    RefusalPolicy, RefusalState, Scope, applies_to, companion_binding, creation_order, deletion_order, deny_binding,
    kind_of, marker_binding, plan, refused_topics, stop_scope, wanted_bindings,
)
from quota_pipeline.enforce.refuser import RefusalFile, Refuser
from quota_pipeline.kafka.acls import Binding
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE as PBR, Entity

DECISIONS = "__quota_throttle_factors"
# An excluded principal: no binding can exempt it.
POLICY = RefusalPolicy(StopExemption(DECISIONS, frozenset({"pipeline"})))


@dataclass
class Record:
    stop: Any = None


@dataclass
class Answer:
    factor: float
    basis: str = "record"
    decision: Any = None
    reason: str = ""


def topics_stop(*topics: str) -> Answer:
    return Answer(0.0, "record", Record(Stop("topics", topics)))


class Killed(BaseException):
    """kill -9 between two requests: nothing after it runs."""


class FakeAcls:
    """An ACL store with the Admin API's calls; `kill_on_create` dies before CreateAcls reaches the cluster."""

    def __init__(self, topics: Sequence[str] = ("A", "B"), bindings: Sequence[Binding] = ()) -> None:
        self.listed = list(topics)
        self.bindings: set[Binding] = set(bindings)
        self.calls: list[tuple[str, list[Binding]]] = []
        self.kill_on_create = False

    def refusal_acls(self, marker_principal: str) -> list[Binding]:
        return sorted(b for b in self.bindings if b.resource_type == "TOPIC" or b.principal == marker_principal)

    @property
    def on_topics(self) -> set[Binding]:
        """What producers and consumers are subject to (the enforcer's markers are on a group no client uses)."""
        return {b for b in self.bindings if b.resource_type == "TOPIC"}

    def create(self, bindings: Sequence[Binding]) -> None:
        if self.kill_on_create:
            raise Killed()
        self.calls.append(("create", list(bindings)))
        self.bindings |= set(bindings)

    def delete(self, bindings: Sequence[Binding]) -> list[Binding]:
        self.calls.append(("delete", list(bindings)))
        gone = [b for b in bindings if b in self.bindings]
        self.bindings -= set(bindings)
        return gone

    def topics(self) -> list[str]:
        return list(self.listed)


def refuser(acls: FakeAcls, tmp_path, **kw) -> Refuser:
    return Refuser("c1", acls, RefusalFile(tmp_path / "c1.refusals.json"), POLICY, settle_seconds=0, **kw)


def state_file(tmp_path) -> set[str]:
    path = tmp_path / "c1.refusals.json"
    if not path.exists():
        return set()
    return {f"{b['permission_type']} {b['operation']} {b['resource_name']}" for b in json.loads(path.read_text())["bindings"]
            if b["resource_type"] == "TOPIC"}  # the markers: see the tests of ownership


OPERATORS_DENY = deny_binding("A")  # an operator's own binding: identical to the one the enforcer would write


# ---- scope ---------------------------------------------------------------------------------------------------------

def test_the_scope_follows_the_rule_the_broker_side_shares():
    named = Record(Stop("topics", ("A",)))
    assert stop_scope(POLICY, 0.5, "record", named) is None
    assert stop_scope(POLICY, 1.0, "record", None) is None
    scope = stop_scope(POLICY, 0.0, "record", named)
    assert scope is not None and not scope.cluster_wide and scope.topics == {"A"}
    # The whole cluster: the property, the fallback or the reader's start, or a record whose stop names no topics
    # (absent, null, cluster or malformed: core.record reads each leniently).
    cluster_policy = RefusalPolicy(StopExemption(DECISIONS), cluster_wide=True)
    assert stop_scope(cluster_policy, 0.0, "record", named).cluster_wide
    assert stop_scope(POLICY, 0.0, "fallback", named).cluster_wide
    assert stop_scope(POLICY, 0.0, "initial", None).cluster_wide
    for raw in (None, {"scope": "cluster"}, {"scope": "topics", "topics": "A"}, {"scope": "topics", "topics": [1]},
                {"scope": "topics"}, "topics"):
        assert stop_scope(POLICY, 0.0, "record", Record(stop_from_json(raw))).cluster_wide, raw
    assert stop_scope(POLICY, 0.0, "record", Record(CLUSTER_STOP)).why == "factor 0, the record stops the cluster"


def test_the_decision_topic_and_kafkas_internal_topics_are_never_refused_and_no_principal_is_exempt():
    listed = ["A", DECISIONS, *INTERNAL_TOPICS]
    everything = Scope(CLUSTER_SCOPE)
    assert refused_topics(everything, listed, [], POLICY) == {"A"}
    assert refused_topics(Scope(StopScope(frozenset({"A", DECISIONS, "__consumer_offsets"}))), [], [], POLICY) == {"A"}
    assert refused_topics(None, listed, ["A"], POLICY) == set()
    # Cluster-wide, a topic refused already stays refused even if the cluster no longer lists it to this principal.
    assert refused_topics(everything, ["B"], ["A"], POLICY) == {"A", "B"}


def test_which_acls_apply_to_a_topic():
    assert applies_to(Binding("User:x", "TOPIC", "app-", "READ", pattern_type="PREFIXED"), "app-1")
    assert applies_to(Binding("User:x", "TOPIC", "*", "READ"), "anything")
    assert not applies_to(Binding("User:x", "TOPIC", "app-", "READ"), "app-1")
    assert not applies_to(Binding("User:x", "GROUP", "A", "READ"), "A")


# ---- planning ------------------------------------------------------------------------------------------------------

def test_plan_creates_the_missing_and_deletes_only_its_own():
    want = {deny_binding("A"), deny_binding("B")}
    mark_b, mark_c = marker_binding("c1", "B"), marker_binding("c1", "C")
    p = plan(want, present=[OPERATORS_DENY], ours=[deny_binding("C"), mark_c], cluster="c1")
    # B's marker is created (and recorded) with B's DENY, in a request before it; A, all someone else's, gets none.
    assert p.create == (deny_binding("B"), mark_b) and p.record == p.create
    assert creation_order(p.create) == [[mark_b], [deny_binding("B")]]
    assert p.operators == (OPERATORS_DENY,)  # someone else's: not created, not recorded, never deleted
    assert p.delete == (deny_binding("C"), mark_c) and deletion_order(p.delete) == [[deny_binding("C")], [mark_c]]
    # The release deletes ours whether or not Describe shows them (a create may not be visible yet).
    release = plan(set(), present=[OPERATORS_DENY], ours=[deny_binding("B"), mark_b], cluster="c1")
    assert release.delete == (deny_binding("B"), mark_b) and release.create == () and release.operators == ()
    # One of ours created moments ago and not shown yet is not sent again; one that vanished later is.
    settled = plan(want, [OPERATORS_DENY], [deny_binding("B"), mark_b], "c1", settling=[deny_binding("B"), mark_b])
    assert settled.create == ()
    again = plan(want, [OPERATORS_DENY, mark_b], [deny_binding("B"), mark_b], "c1")
    assert again.create == (deny_binding("B"),) and again.record == ()


def test_a_companion_allow_only_where_no_other_acl_applies_and_only_with_allow_everyone():
    operator_prefixed = Binding("User:alice", "TOPIC", "B", "READ", pattern_type="PREFIXED")
    wanted = wanted_bindings(["A", "B"], [operator_prefixed], [], allow_everyone=True)
    assert wanted == {deny_binding("A"), companion_binding("A"), deny_binding("B")}
    assert wanted_bindings(["A"], [], [], allow_everyone=False) == {deny_binding("A")}
    # Its own DENY and companion do not count as other ACLs; an operator's identical DENY does.
    assert wanted_bindings(["A"], [deny_binding("A"), companion_binding("A")], [deny_binding("A"), companion_binding("A")],
                           True) == {deny_binding("A"), companion_binding("A")}
    assert wanted_bindings(["A"], [OPERATORS_DENY], [], True) == {deny_binding("A")}


# ---- the refuser against a fake cluster ----------------------------------------------------------------------------

def test_a_stop_refuses_its_topics_and_the_release_deletes_exactly_its_bindings(tmp_path):
    acls = FakeAcls(["A", "B", "C"], [OPERATORS_DENY, Binding("User:bob", "TOPIC", "B", "READ")])
    r = refuser(acls, tmp_path)
    changes = r.step(topics_stop("A", "B"))
    assert {b for b in acls.on_topics if b.permission_type == "DENY"} == {deny_binding("A"), deny_binding("B")}
    assert state_file(tmp_path) == {"DENY WRITE B"}  # the operator's identical DENY on A is not taken as ours
    assert [c.action for c in changes] == ["deny", "operator"]
    assert "deny WRITE to User:*" in str(changes[0]) and "not the enforcer's" in str(changes[1])
    assert r.step(topics_stop("A", "B")) == []  # nothing to do, nothing said twice
    # The stop moves to C: B's binding goes at this step, C is refused.
    r.step(topics_stop("A", "C"))
    assert deny_binding("B") not in acls.bindings and deny_binding("C") in acls.bindings
    assert state_file(tmp_path) == {"DENY WRITE C"}
    released = r.step(Answer(1.0))
    assert [str(c) for c in released] == ["topic C: release, the DENY WRITE deleted: factor 1, no stop"]
    assert acls.on_topics == {OPERATORS_DENY, Binding("User:bob", "TOPIC", "B", "READ")}
    assert not (tmp_path / "c1.refusals.json").exists()
    acls.calls.clear()
    assert r.step(Answer(1.0)) == [] and acls.calls == []  # no stop, nothing of ours: no request


def test_a_cluster_wide_stop_refuses_every_listed_topic_but_the_decision_topic(tmp_path):
    acls = FakeAcls(["A", "B", DECISIONS, "__consumer_offsets"])
    r = refuser(acls, tmp_path, allow_everyone=True)
    r.step(Answer(0.0, "fallback"))
    assert acls.on_topics == {deny_binding("A"), companion_binding("A"), deny_binding("B"), companion_binding("B")}
    # Markers first; companions are created before the DENYs, deleted after them: no moment refuses reads.
    assert [[kind_of(b) for b in batch] for op, batch in acls.calls] == [
        ["marker"] * 2, ["companion"] * 2, ["deny"] * 2]
    acls.listed.append("new")  # a topic created during the stop is refused at the next step
    r.step(Answer(0.0, "fallback"))
    assert deny_binding("new") in acls.bindings
    acls.calls.clear()
    r.step(Answer(0.3))
    assert [[kind_of(b) for b in batch] for op, batch in acls.calls] == [
        ["deny"] * 3, ["companion"] * 3, ["marker"] * 3]
    assert acls.bindings == set()


def test_a_graded_factor_after_a_stop_releases_and_throttle_mode_releases_what_a_refusing_run_left(tmp_path):
    acls = FakeAcls()
    refuser(acls, tmp_path).step(topics_stop("A"))
    assert acls.on_topics == {deny_binding("A")}
    # Restarted in throttle mode: it writes no binding, at factor 0 either, and removes the one it wrote.
    later = refuser(acls, tmp_path, mode="throttle")
    assert [c.action for c in later.step(topics_stop("A"))] == ["release"]
    assert acls.on_topics == set() and state_file(tmp_path) == set()


def test_write_ahead_a_kill_between_recording_and_creating_leaves_a_record_and_a_restart_finishes(tmp_path):
    acls = FakeAcls(bindings=[OPERATORS_DENY])
    acls.kill_on_create = True
    with pytest.raises(Killed):
        refuser(acls, tmp_path).step(topics_stop("A", "B"))
    assert state_file(tmp_path) == {"DENY WRITE B"} and deny_binding("B") not in acls.bindings
    acls.kill_on_create = False
    restarted = refuser(acls, tmp_path)
    restarted.step(topics_stop("A", "B"))  # still a stop: it creates what it recorded
    assert deny_binding("B") in acls.bindings
    restarted.step(Answer(1.0))
    assert acls.on_topics == {OPERATORS_DENY}


def test_a_kill_before_creating_then_a_release_deletes_nothing_but_its_own(tmp_path):
    acls = FakeAcls(bindings=[OPERATORS_DENY])
    acls.kill_on_create = True
    with pytest.raises(Killed):
        refuser(acls, tmp_path).step(topics_stop("B"))
    acls.kill_on_create = False
    acls.bindings.add(Binding("User:ops", "TOPIC", "B", "WRITE", permission_type="DENY"))  # someone else's, on B
    refuser(acls, tmp_path).step(Answer(1.0))
    # The exact binding recorded, then its marker: nothing else.
    assert acls.calls == [("delete", [deny_binding("B")]), ("delete", [marker_binding("c1", "B")])]
    assert acls.on_topics == {OPERATORS_DENY, Binding("User:ops", "TOPIC", "B", "WRITE", permission_type="DENY")}
    assert state_file(tmp_path) == set()


def test_dry_run_says_what_it_would_write_and_writes_nothing(tmp_path):
    acls = FakeAcls()
    changes = refuser(acls, tmp_path, dry_run=True).step(topics_stop("A"))
    assert [str(c) for c in changes] == ["topic A: would deny WRITE to User:* (producers are refused): factor 0, "
                                         "the record stops this topic"]
    assert acls.on_topics == set() and acls.calls == [] and state_file(tmp_path) == set()


def test_the_state_file_round_trips_and_refuses_a_binding_it_never_writes(tmp_path):
    store = RefusalFile(tmp_path / "c1.refusals.json")
    state = RefusalState("c1", frozenset({deny_binding("A"), companion_binding("A")}))
    store.save(state)
    assert store.load() == state
    assert [p.name for p in tmp_path.iterdir()] == ["c1.refusals.json"]
    raw = json.loads((tmp_path / "c1.refusals.json").read_text())
    raw["bindings"].append({**raw["bindings"][0], "principal": "User:alice"})
    (tmp_path / "c1.refusals.json").write_text(json.dumps(raw))
    with pytest.raises(BaselineError, match="never writes"):
        store.load()
    beside = RefusalFile.beside(BaselineFile(tmp_path / "enforce" / "c1.json"))
    assert beside.path == tmp_path / "enforce" / "c1.refusals.json" and beside.root == tmp_path / "enforce"


# ---- with the quota enforcer ---------------------------------------------------------------------------------------

class Quotas:
    def __init__(self, quotas: dict) -> None:
        self.quotas = {e: dict(v) for e, v in quotas.items()}

    def describe(self) -> dict:
        return {e: dict(v) for e, v in self.quotas.items()}

    def alter(self, changes, validate_only: bool = False) -> None:
        for c in changes:
            values = self.quotas.setdefault(c.entity, {})
            if c.value is None:
                values.pop(c.key, None)
            else:
                values[c.key] = c.value
            if not values:
                del self.quotas[c.entity]


class Answers:
    def __init__(self, answer: Answer) -> None:
        self.value = answer

    def answer(self, cluster: str | None = None) -> Answer:
        return self.value

    def current_factor(self, cluster: str | None = None) -> float:
        return self.value.factor


def test_at_factor_0_no_quota_is_lowered_and_graded_factors_still_throttle(tmp_path):
    base = {Entity.of("alice"): {PBR: 2000.0}}
    quotas, acls, answers = Quotas(base), FakeAcls(), Answers(Answer(0.5))
    enforcer = Enforcer("c1", answers, quotas, BaselineFile(tmp_path / "c1.json"),  # type: ignore[arg-type]
                        Policy.of([], None, produce_floor=1.0), settle_seconds=0, refuser=refuser(acls, tmp_path))
    assert enforcer.step().action == "throttle" and quotas.describe()[Entity.of("alice")] == {PBR: 1000.0}
    answers.value = topics_stop("A")
    result = enforcer.step()  # refused, and the graded throttle lifted: a stop hands out no mute
    assert acls.on_topics == {deny_binding("A")} and quotas.describe() == base
    assert [c.action for c in result.refusals] == ["deny"] and result.factor == 0.0
    answers.value = Answer(0.5)
    enforcer.step()
    assert acls.on_topics == set() and quotas.describe()[Entity.of("alice")] == {PBR: 1000.0}
    answers.value = Answer(1.0)
    enforcer.step()
    enforcer.step()
    assert quotas.describe() == base and not (tmp_path / "c1.json").exists()


# ---- the command's settings ----------------------------------------------------------------------------------------

def test_the_stop_mode_comes_from_the_flag_else_the_property_else_refuse():
    from quota_pipeline.cli import build_parser
    from quota_pipeline.commands.enforce import allow_everyone, refusal_warnings, stop_mode
    from quota_pipeline.core import config as cfg

    def conf(**extra: str) -> cfg.Config:
        return cfg.parse({cfg.HARD_BYTES: "1", cfg.BOOTSTRAP: "k:9092", **extra})

    args = build_parser().parse_args(["enforce", "c.properties"])
    assert stop_mode(args, conf()) == "refuse"
    assert stop_mode(args, conf(**{"quota.pipeline.enforce.stop": "throttle"})) == "throttle"
    flagged = build_parser().parse_args(["enforce", "c.properties", "--stop", "refuse"])
    assert stop_mode(flagged, conf(**{"quota.pipeline.enforce.stop": "throttle"})) == "refuse"
    with pytest.raises(cfg.ConfigError):
        conf(**{"quota.pipeline.enforce.stop": "pause"})
    assert not allow_everyone(conf()) and allow_everyone(conf(**{"allow.everyone.if.no.acl.found": "true"}))
    # Said once at start: excluded principals are refused too (only super.users escape), and allow.everyone unset.
    warned = refusal_warnings(conf(**{cfg.EXCLUDED: "User:pipeline"}))
    assert len(warned) == 2 and "super.users" in warned[0] and "User:pipeline" in warned[0]
    assert refusal_warnings(conf(**{"allow.everyone.if.no.acl.found": "true"})) == []


def test_a_binding_it_just_deleted_and_still_shown_is_not_taken_for_someone_elses(tmp_path):
    acls, clock = FakeAcls(), [0.0]
    r = Refuser("c1", acls, RefusalFile(tmp_path / "c1.refusals.json"), POLICY, settle_seconds=5,
                monotonic=lambda: clock[0])
    r.step(topics_stop("A"))
    clock[0] = 10.0
    r.step(Answer(1.0))
    acls.bindings.add(deny_binding("A"))  # Describe lags behind the delete
    clock[0] = 11.0
    assert [c.action for c in r.step(topics_stop("A"))] == ["deny"]  # the stop again: its own, recorded
    assert state_file(tmp_path) == {"DENY WRITE A"}


def test_the_companion_goes_when_an_operators_acl_comes_to_apply_to_the_topic(tmp_path):
    acls = FakeAcls()
    r = refuser(acls, tmp_path, allow_everyone=True)
    r.step(topics_stop("A"))
    assert acls.on_topics == {deny_binding("A"), companion_binding("A")}
    theirs = Binding("User:alice", "TOPIC", "A", "READ", pattern_type="PREFIXED")
    acls.bindings.add(theirs)
    [change] = r.step(topics_stop("A"))
    assert change.action == "release" and "another ACL applies" in str(change)
    assert acls.on_topics == {deny_binding("A"), theirs} and state_file(tmp_path) == {"DENY WRITE A"}


# ---- whose binding it is: a state file claims, the cluster's markers decide ----------------------------------------

def planted(tmp_path, *bindings: Binding) -> None:
    """A refusal state file written by someone who can write the directory (no signing keys configured)."""
    RefusalFile(tmp_path / "c1.refusals.json").save(RefusalState("c1", frozenset(bindings)))


@pytest.mark.parametrize("mode", ["refuse", "throttle"])
def test_a_planted_file_listing_an_operators_binding_never_gets_it_deleted(tmp_path, mode):
    operators = {OPERATORS_DENY, companion_binding("A")}  # their DENY and ALLOW on A, of the shapes enforce writes
    acls = FakeAcls(bindings=operators)
    planted(tmp_path, *operators, marker_binding("c1", "A"))  # a marker in the file proves nothing: Kafka's does
    r = refuser(acls, tmp_path, mode=mode)
    said = [str(c) for c in r.step(topics_stop("A"))]
    assert sum("not the enforcer's, left as it is and dropped from the file" in line for line in said) == 2, said
    r.step(Answer(1.0))
    assert acls.on_topics == operators and ("delete", [OPERATORS_DENY]) not in acls.calls
    assert state_file(tmp_path) == set()
    # A restart finds nothing left to claim.
    assert refuser(acls, tmp_path, mode=mode).step(Answer(1.0)) == [] and acls.on_topics == operators


def test_an_identical_binding_created_while_the_enforcer_was_down_after_its_record_is_never_deleted(tmp_path):
    acls = FakeAcls()
    acls.kill_on_create = True
    with pytest.raises(Killed):  # recorded, then killed before its first CreateAcls (the marker's)
        refuser(acls, tmp_path).step(topics_stop("B"))
    assert state_file(tmp_path) == {"DENY WRITE B"}
    acls.kill_on_create = False
    acls.bindings.add(deny_binding("B"))  # the operator's, while the enforcer is down
    restarted = refuser(acls, tmp_path)
    assert [c.action for c in restarted.step(topics_stop("B"))] == ["unclaimed", "operator"]
    restarted.step(Answer(1.0))
    assert acls.on_topics == {deny_binding("B")} and acls.bindings == {deny_binding("B")}  # no marker left either
    assert not (tmp_path / "c1.refusals.json").exists()


def test_after_a_kill_its_own_bindings_shown_with_their_marker_are_still_released(tmp_path):
    acls = FakeAcls(["A"])
    refuser(acls, tmp_path, allow_everyone=True).step(topics_stop("A"))  # then kill -9: the file stays
    assert acls.bindings == {deny_binding("A"), companion_binding("A"), marker_binding("c1", "A")}
    restarted = refuser(acls, tmp_path, allow_everyone=True, mode="throttle")
    assert [c.action for c in restarted.step(topics_stop("A"))] == ["release", "release"]
    assert acls.bindings == set()


def test_a_state_file_of_the_earlier_format_or_with_another_clusters_marker_is_refused(tmp_path):
    path = tmp_path / "c1.refusals.json"
    store = RefusalFile(path)
    store.save(RefusalState("c1", frozenset({deny_binding("A"), marker_binding("c2", "A")})))
    with pytest.raises(BaselineError, match="never writes"):
        store.load()
    path.write_text(json.dumps({"format_version": 1, "cluster": "c1", "bindings": []}))
    with pytest.raises(BaselineError, match="earlier release"):
        store.load()
