"""The enforcer's requests in order: an exemption is granted in a request before the throttle and withdrawn in one
after the restore (a broker applies the entries of one AlterClientQuotas request in no particular order)."""
from __future__ import annotations

from quota_pipeline.enforce.baseline import BaselineFile
from quota_pipeline.enforce.enforcer import Enforcer
from quota_pipeline.enforce.plan import Policy
from quota_pipeline.kafka.client_quotas import PRODUCER_BYTE_RATE as PBR, UNLIMITED, Entity, Quotas
from quota_pipeline.kafka.quota_admin import Change

EXEMPT = {Entity.of("pipeline")}


class RecordingAdmin:
    """Applies each alter at once and keeps the requests as they were sent."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = {e: dict(v) for e, v in quotas.items()}
        self.requests: list[list[Change]] = []

    def describe(self) -> Quotas:
        return {e: dict(v) for e, v in self.quotas.items()}

    def alter(self, changes: list[Change], validate_only: bool = False) -> None:
        self.requests.append(list(changes))
        for c in changes:
            values = self.quotas.setdefault(c.entity, {})
            if c.value is None:
                values.pop(c.key, None)
            else:
                values[c.key] = c.value
            if not values:
                del self.quotas[c.entity]


class Factor:
    value = 0.0

    def current_factor(self, cluster: str | None = None) -> float:
        return self.value


def test_exemptions_are_granted_before_the_throttle_and_withdrawn_after_the_restore(tmp_path):
    baseline = {Entity.of("alice"): {PBR: 2000.0}, Entity.of(client_id="batch"): {PBR: 300.0}}
    admin, factor = RecordingAdmin(baseline), Factor()
    enforcer = Enforcer("c1", factor, admin, BaselineFile(tmp_path / "baseline.json"),  # type: ignore[arg-type]
                        Policy.of(["User:pipeline"], None, produce_floor=1.0), settle_seconds=0)
    assert enforcer.step().action == "throttle"
    grants, throttle = admin.requests
    assert {c.entity for c in grants} == EXEMPT and {c.value for c in grants} == {UNLIMITED}
    assert {(str(c.entity), c.value) for c in throttle} == {
        ("user=alice, client-id=<default>", 1.0), ("user=<default>, client-id=<default>", 1.0)}
    factor.value = 1.0
    admin.requests.clear()
    assert enforcer.step().action == "restore"
    restore, withdrawals = admin.requests
    assert {(str(c.entity), c.value) for c in restore} == {
        ("user=alice, client-id=<default>", None), ("user=<default>, client-id=<default>", None)}
    assert {c.entity for c in withdrawals} == EXEMPT and {c.value for c in withdrawals} == {None}
    assert admin.describe() == baseline
