"""The enforcer loop: apply the reader's factor to a stock Kafka cluster through client quotas (KIP-546)."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.enforce import plan as enforce_plan
from quota_pipeline.enforce.baseline import BaselineFile, EnforcerState
from quota_pipeline.enforce.plan import Policy
from quota_pipeline.enforce.refuser import RefusalChange, Refuser
from quota_pipeline.kafka.acl_admin import AclAdminError
from quota_pipeline.kafka.quota_admin import Change, QuotaAdmin, QuotaAdminError
from quota_pipeline.kafka.client_quotas import Quotas

log = logging.getLogger(__name__)

DEFAULT_SETTLE_SECONDS = 10.0  # Kafka 4.0 shows an alteration "under a second" later; ten is ample
DEFAULT_INTERVAL_SECONDS = 5.0


class FactorSource(Protocol):
    def current_factor(self, cluster: str | None = None) -> float: ...


class AnswerSource(FactorSource, Protocol):
    """The reader's answer with its basis and record (quota_pipeline.reader.reader.Reader.answer)."""

    def answer(self, cluster: str | None = None) -> Any: ...


@dataclass
class StepResult:
    factor: float
    action: str  # idle | throttle | update | restore | restored | waiting | planned
    changes: list[Change] = field(default_factory=list)
    operator_edits: list[Change] = field(default_factory=list)
    refusals: list[RefusalChange] = field(default_factory=list)  # ACL bindings created or deleted (refusing stop)


class Enforcer:
    """One reconcile per `step()`: read the factor, describe the quotas, record the baseline, alter.

    The baseline is saved before the first change and after every adoption of an operator's edit; it is
    deleted only once Describe shows it restored. See docs/enforce.md for the semantics."""

    def __init__(self, cluster: str, factors: FactorSource, admin: QuotaAdmin, store: BaselineFile, policy: Policy,
                 *, dry_run: bool = False, settle_seconds: float = DEFAULT_SETTLE_SECONDS,
                 clock: Clock = SYSTEM, refuser: Refuser | None = None) -> None:
        self.cluster = cluster
        self.factors = factors
        self.admin = admin
        self.store = store
        self.policy = policy
        self.dry_run = dry_run
        self.settle_seconds = settle_seconds
        self._clock = clock
        self._state: EnforcerState | None = store.load()
        self._resend = True  # the first step after a start re-sends whatever a crash left unfinished
        self._last_plan: list[Change] | None = None
        self.refuser = refuser  # with it, `factors` must answer (AnswerSource)

    @property
    def state(self) -> EnforcerState | None:
        return self._state

    def step(self) -> StepResult:
        if self.refuser is None:
            return self._quota_step(self.factors.current_factor(self.cluster))
        answer = self.factors.answer(self.cluster)  # type: ignore[attr-defined]
        factor = answer.factor
        # A refusing stop lowers no quota: a mute handed out during the stop would hold clients after the release.
        quota_factor = 1.0 if self.refuser.refusing and factor <= 0.0 else factor
        if factor <= 0.0:  # refuse first, then lift a graded throttle: no moment admits more than before
            refusals = self.refuser.step(answer)
            result = self._quota_step(quota_factor)
        else:  # throttle first, then release: the same the other way
            result = self._quota_step(quota_factor)
            refusals = self.refuser.step(answer)
        action = result.action
        if refusals and action in ("idle", "planned") and not result.changes:
            action = "planned" if self.dry_run else ("refuse" if any(r.action == "deny" for r in refusals) else "release")
        return StepResult(factor, action, result.changes, result.operator_edits, refusals)

    def _quota_step(self, factor: float) -> StepResult:
        current = self.admin.describe()
        if self._state is None:
            return self._start(factor, current)
        return self._follow(factor, current)

    def _start(self, factor: float, current: Quotas) -> StepResult:
        if factor >= 1.0:
            return StepResult(factor, "idle")
        changes = enforce_plan.plan(current, current, factor, self.policy)
        if self.dry_run:
            return StepResult(factor, "planned", changes)
        state = EnforcerState(self.cluster, baseline=current, applied=enforce_plan.target(current, factor, self.policy),
                              factor=factor, recent=[(self._clock.now().timestamp(), current)])
        self.store.save(state)  # durable before the first change: the operator's quotas can always be restored
        self._state = state
        self._alter(changes, current)
        return StepResult(factor, "throttle", changes)

    def _follow(self, factor: float, current: Quotas) -> StepResult:
        state = self._state
        assert state is not None
        now = self._clock.now().timestamp()
        resend = self._resend
        # After a restart or a failed alter, a recorded write may be unfinished: the values it replaced are
        # ours whatever their age, and the plan starts from what Describe shows so that it is sent again.
        # Otherwise only writes within the settle time explain a difference, and the plan starts from what
        # was written (Describe may not show it yet).
        recent = [(t, q) for t, q in state.recent if resend or now - t < self.settle_seconds]
        seen = enforce_plan.tell_edits_from_lag(current, state.applied, [q for _, q in recent])
        baseline = enforce_plan.adopt(state.baseline, seen.operator)
        for edit in seen.operator:
            log.warning("operator change while throttled, taken as the new baseline: %s", edit)
        base = current if resend else seen.believed
        changes = enforce_plan.plan(baseline, base, factor, self.policy)
        if self.dry_run:
            return StepResult(factor, "planned", changes, seen.operator)
        if changes:
            state = EnforcerState(self.cluster, baseline, enforce_plan.target(baseline, factor, self.policy), factor,
                                  recent + [(now, seen.believed)])
            self.store.save(state)
            self._state = state
            self._alter(changes, base)
            return StepResult(factor, "restore" if factor >= 1.0 else "update", changes, seen.operator)
        self._resend = False
        if factor >= 1.0 and (resend or not seen.lagging):
            self.store.delete()  # Describe shows the baseline: nothing left to restore
            self._state = None
            return StepResult(factor, "restored", [], seen.operator)
        if seen.operator or len(recent) != len(state.recent):
            self._state = EnforcerState(self.cluster, baseline, state.applied, state.factor, recent)
            self.store.save(self._state)
        return StepResult(factor, "waiting" if seen.lagging else "idle", [], seen.operator)

    def _alter(self, changes: list[Change], base: Quotas) -> None:
        try:
            for batch in enforce_plan.phases(changes, base):  # exemptions before the throttle, lifted after it
                self.admin.alter(batch)
        except QuotaAdminError:
            self._resend = True  # some entities may have changed, some not: next step re-sends from Describe
            raise
        self._resend = False

    def run(self, stop: threading.Event, wake: threading.Event | None = None,
            interval: float = DEFAULT_INTERVAL_SECONDS, report: Callable[[StepResult], None] | None = None) -> None:
        """Step until `stop` is set: after every wake-up (a factor change) and at least every `interval`
        seconds (operator edits, lagging reads). A failed step is logged and retried, never fatal."""
        wake = wake or threading.Event()
        while not stop.is_set():
            wake.clear()
            try:
                result = self.step()
                if report is not None:
                    report(result)
            except (QuotaAdminError, AclAdminError) as exc:
                log.error("%s; retrying in %.0f s", exc, interval)
            if stop.is_set():
                break
            wake.wait(interval)
