"""The refusing stop's I/O: DescribeAcls, write-ahead to the state file, CreateAcls, DeleteAcls, and the lines it says.

The planning is in refuse.py. The state file lists every binding the enforcer created or is about to create, and
nothing else: it is written before CreateAcls, and a binding leaves it only after DeleteAcls. So a kill -9 at any
point leaves a record of every binding that may be ours. What a started enforcer reads from the file is a claim: a
listed binding that the cluster shows without the enforcer's marker on its topic is not its own (refuse.unclaimed)
and is never deleted.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from quota_pipeline.core.display import visible
from quota_pipeline.enforce.baseline import StateFile
from quota_pipeline.enforce.refuse import (
    COMPANION, DENY, MARKER, MARKER_PRINCIPAL, STOP_REFUSE, AclChanges, RefusalPolicy, RefusalState, Scope,
    creation_order, deletion_order, deny_binding, kind_of, plan, refused_topics, stop_scope, unclaimed,
    wanted_bindings,
)
from quota_pipeline.kafka.acls import Binding

log = logging.getLogger(__name__)

DEFAULT_SETTLE_SECONDS = 10.0  # an ACL reaches the brokers' DescribeAcls through the metadata log, under a second


class AclPort(Protocol):
    def refusal_acls(self, marker_principal: str) -> list[Binding]: ...
    def create(self, bindings: Sequence[Binding]) -> None: ...
    def delete(self, bindings: Sequence[Binding]) -> list[Binding]: ...
    def topics(self) -> list[str]: ...


class AnswerLike(Protocol):
    factor: float
    basis: str
    decision: Any


@dataclass(frozen=True)
class RefusalChange:
    """One printed line: a binding created (deny, companion), deleted (release), someone else's left alone
    (operator), or listed in the state file but not the enforcer's (unclaimed)."""

    action: str  # deny | release | operator | unclaimed
    binding: Binding
    why: str
    dry_run: bool = False

    def __str__(self) -> str:
        topic = visible(self.binding.resource_name)
        would = "would " if self.dry_run else ""
        if self.action == "operator":
            return f"topic {topic}: already refused by a binding that is not the enforcer's; left as it is ({self.why})"
        if self.action == "unclaimed":
            return (f"topic {topic}: the refusal state file lists {self.binding.permission_type} "
                    f"{self.binding.principal} {self.binding.operation}, which the cluster shows without the "
                    f"enforcer's marker: not the enforcer's, left as it is and dropped from the file ({self.why})")
        if self.action == "deny":
            if kind_of(self.binding) == COMPANION:
                return (f"topic {topic}: {would}allow every other operation to User:* (no other ACL applies to it, so "
                        f"the DENY alone would refuse reads too): {self.why}")
            return f"topic {topic}: {would}deny WRITE to User:* (producers are refused): {self.why}"
        what = "the DENY WRITE" if kind_of(self.binding) == DENY else "the companion ALLOW"
        return f"topic {topic}: {would}release, {what} deleted: {self.why}"


class RefusalFile(StateFile):
    """The state file beside the baseline file, written like it: the bindings the enforcer wrote (write-ahead)."""

    WHAT = "refusal state file"
    BROKEN = ("it lists the DENY bindings the enforcer wrote: repair it, or delete those bindings by hand "
              "(kafka-acls.sh --remove) and delete the file")
    NOT_WRITTEN = "no binding was created"

    @classmethod
    def beside(cls, baseline: StateFile) -> "RefusalFile":
        """`<cluster>.refusals.json` next to `<cluster>.json`, in the same root and signed with the same keys."""
        return cls(baseline.path.with_name(baseline.path.stem + ".refusals.json"), baseline.root, baseline.keys)

    def load(self) -> RefusalState | None:
        return self._load(RefusalState.from_json)

    def save(self, state: RefusalState) -> None:
        if not state.bindings:
            self.delete()
            return
        self._save(state.to_json())


class Refuser:
    """One reconcile of the stop's ACLs per `step(answer)`.

    mode `refuse`: at factor 0 the topics of the stop's scope are refused; otherwise none. Any other mode (`throttle`)
    only deletes what an earlier refusing run left in the state file."""

    def __init__(self, cluster: str, admin: AclPort, store: RefusalFile, policy: RefusalPolicy, *,
                 mode: str = STOP_REFUSE, allow_everyone: bool = False,
                 dry_run: bool = False, settle_seconds: float = DEFAULT_SETTLE_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.admin = admin
        self.store = store
        self.policy = policy  # the decision topic, quota.pipeline.stop.scope
        self.mode = mode
        self.allow_everyone = allow_everyone
        self.dry_run = dry_run
        self.settle_seconds = settle_seconds
        self._monotonic = monotonic
        self._state = store.load() or RefusalState(cluster)
        self._claims: frozenset[Binding] = self._state.bindings  # read, not written by this process: checked once
        self._created: dict[Binding, float] = {}  # when this process sent each create (not shown at once)
        self._deleted: dict[Binding, float] = {}  # ... and each delete (still shown for a moment)
        self._operators_said: set[Binding] = set()

    @property
    def refusing(self) -> bool:
        return self.mode == STOP_REFUSE

    @property
    def ours(self) -> frozenset[Binding]:
        return self._state.bindings

    def scope(self, answer: AnswerLike) -> Scope | None:
        if not self.refusing:
            return None
        return stop_scope(self.policy, answer.factor, answer.basis, answer.decision)

    def step(self, answer: AnswerLike) -> list[RefusalChange]:
        scope = self.scope(answer)
        if scope is None and not self._state.bindings:
            self._operators_said.clear()
            return []  # nothing to refuse, nothing of ours to release: no request at all
        now = self._monotonic()
        shown = self.admin.refusal_acls(MARKER_PRINCIPAL)
        # A file's claim is judged on what the cluster shows, before this process deletes anything.
        disowned = unclaimed(self._claims, shown, self.cluster)
        # A binding this process deleted moments ago may still be shown: it is not someone else's.
        present = [b for b in shown if now - self._deleted.get(b, -math.inf) >= self.settle_seconds]
        ours = self._state.bindings - disowned
        listed = self.admin.topics() if scope is not None and scope.cluster_wide else []
        topics = refused_topics(scope, listed, [b.resource_name for b in ours if kind_of(b) == DENY], self.policy)
        wanted = wanted_bindings(topics, present, ours, self.allow_everyone)
        settling = [b for b, at in self._created.items() if now - at < self.settle_seconds and b in ours]
        todo = plan(wanted, present, ours, self.cluster, settling)
        changes = [RefusalChange("unclaimed", b, "someone else created it, or the enforcer did not "
                                                   "write the file") for b in sorted(disowned)]
        changes += self._describe(todo, scope, answer, wanted)
        if not self.dry_run:
            if disowned:
                self._save(self._state.without(disowned))
            self._claims = frozenset()  # what is left is ours: shown with its marker, or to be created by us
            self._apply(todo, now)
        return changes

    def _describe(self, todo: AclChanges, scope: Scope | None, answer: AnswerLike,
                  wanted: set[Binding]) -> list[RefusalChange]:
        def released(b: Binding) -> str:
            if not self.refusing:
                return f"--stop {self.mode}: the bindings of an earlier refusing run go"
            if scope is None:
                return f"factor {answer.factor:g}, no stop"
            if kind_of(b) == COMPANION and deny_binding(b.resource_name) in wanted:
                return "another ACL applies to the topic now: it decides who reads it"
            return "the topic left the stop's scope"
        why = scope.why if scope is not None else ""
        out = [RefusalChange("deny", b, why, self.dry_run)
               for batch in creation_order(todo.create) for b in batch if kind_of(b) != MARKER]  # in the order sent
        out += [RefusalChange("release", b, released(b), self.dry_run)
                for batch in deletion_order(todo.delete) for b in batch if kind_of(b) != MARKER]
        fresh = [b for b in todo.operators if b not in self._operators_said]
        self._operators_said = set(todo.operators)
        out += [RefusalChange("operator", b, why) for b in fresh]
        return out

    def _apply(self, todo: AclChanges, now: float) -> None:
        if todo.record:
            # Write-ahead: a kill between this save and CreateAcls leaves a record of a binding that may exist.
            self._save(self._state.with_added(todo.record))
        for batch in creation_order(todo.create):
            self.admin.create(batch)
            for b in batch:
                self._created[b] = now
        if todo.delete:
            for batch in deletion_order(todo.delete):
                self.admin.delete(batch)
            self._save(self._state.without(todo.delete))
            for b in todo.delete:
                self._created.pop(b, None)
                self._deleted[b] = now
        for b in todo.create:
            self._deleted.pop(b, None)

    def _save(self, state: RefusalState) -> None:
        self.store.save(state)
        self._state = state
