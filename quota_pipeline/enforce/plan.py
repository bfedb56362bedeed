"""Enforcement on stock Kafka as pure functions: throttled target quotas, the changes to get there, operator edits."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from quota_pipeline.kafka.quota_admin import Change
from quota_pipeline.kafka.client_quotas import CLIENT_ID, IP, PRODUCER_BYTE_RATE, UNLIMITED, USER, Entity, Quotas

# The lowest precedence level: it applies to exactly the clients no other entity gives a produce quota.
CATCH_ALL = Entity.of(default_client_id=True)


@dataclass(frozen=True)
class Policy:
    """What the enforcer needs from the Strimzi properties."""

    excluded_users: frozenset[str]  # principal names, "User:" removed
    produce_base: float | None  # client.quota.callback.static.produce: the base of clients with no produce quota
    excluded_client_ids: frozenset[str] = frozenset()  # the pipeline's own clients (quota.pipeline.excluded.client.ids)

    @classmethod
    def of(cls, excluded_principals: Iterable[str], produce: float | None,
           excluded_client_ids: Iterable[str] = ()) -> "Policy":
        return cls(frozenset(p[len("User:"):] if p.startswith("User:") else p for p in excluded_principals), produce,
                   frozenset(excluded_client_ids))


def scaled(value: float, factor: float) -> float:
    """max(1, value x factor) as a whole number: producer_byte_rate is a LONG in Kafka (floor: never above)."""
    return float(max(1, math.floor(value * factor)))


def applies_to_producers(entity: Entity) -> bool:
    return not entity.has(IP) and (entity.has(USER) or entity.has(CLIENT_ID))


def names_excluded_user(entity: Entity, policy: Policy) -> bool:
    return entity.has(USER) and entity.name(USER) in policy.excluded_users


def names_excluded_client(entity: Entity, policy: Policy) -> bool:
    return entity.has(CLIENT_ID) and entity.name(CLIENT_ID) in policy.excluded_client_ids


def client_exemptions(baseline: Mapping[Entity, Mapping[str, float]], policy: Policy) -> list[Entity]:
    """Where an excluded client id gets an explicit unlimited produce quota, so that no throttle reaches it
    whatever its principal (PLAINTEXT clients are all ANONYMOUS): `user=<default>, client-id=<id>` outranks every
    default and client-id level; for a user whose own quota (`user=U` or `user=U, client-id=<default>`) would
    be scaled, `user=U, client-id=<id>` outranks that too."""
    users = sorted({e.name(USER) for e, v in baseline.items() if PRODUCER_BYTE_RATE in v and e.has(USER)
                    and e.name(USER) is not None and not e.has(IP) and e.name(CLIENT_ID) is None})
    return [Entity.of(default_user=True, client_id=c) for c in sorted(policy.excluded_client_ids)] + [
        Entity.of(user, c) for user in users for c in sorted(policy.excluded_client_ids)]


def target(baseline: Mapping[Entity, Mapping[str, float]], factor: float, policy: Policy) -> Quotas:
    """The quotas that make every non-excluded client's effective produce quota max(1, base x factor).

    - factor >= 1: the baseline itself.
    - every user / client-id / user+client-id entity (named or default) with a producer_byte_rate, except
      those naming an excluded user: that value scaled. Scaling in place keeps the winning level of every
      client, so each client's effective quota is its own baseline quota scaled.
    - clients with no produce quota at any level (unlimited): `client-id=<default>` gets the produce base
      (P+produce) scaled. Without P+produce an unlimited base scaled is still unlimited, except at factor 0
      where Strimzi's callback gives max(1, MAX x 0) = 1 byte/s, so 1 it is.
    - excluded users: `user=<name>` gets producer_byte_rate = Long.MAX_VALUE (Kafka's unlimited) when the
      baseline sets none there, so no default can throttle them; entities naming them keep their values.
    """
    out: Quotas = {e: dict(v) for e, v in baseline.items()}
    if factor >= 1.0:
        return out
    for entity, values in out.items():
        if (PRODUCER_BYTE_RATE in values and applies_to_producers(entity) and not names_excluded_user(entity, policy)
                and not names_excluded_client(entity, policy)):
            values[PRODUCER_BYTE_RATE] = scaled(values[PRODUCER_BYTE_RATE], factor)
    if PRODUCER_BYTE_RATE not in baseline.get(CATCH_ALL, {}):
        if policy.produce_base is not None:
            out.setdefault(CATCH_ALL, {})[PRODUCER_BYTE_RATE] = scaled(policy.produce_base, factor)
        elif factor <= 0.0:
            out.setdefault(CATCH_ALL, {})[PRODUCER_BYTE_RATE] = 1.0
    for entity in [Entity.of(user) for user in sorted(policy.excluded_users)] + client_exemptions(baseline, policy):
        if PRODUCER_BYTE_RATE not in baseline.get(entity, {}):
            out.setdefault(entity, {})[PRODUCER_BYTE_RATE] = UNLIMITED
    return out


def diff(current: Mapping[Entity, Mapping[str, float]], wanted: Mapping[Entity, Mapping[str, float]]) -> list[Change]:
    """The changes that turn `current` into `wanted` (removing a value that is not wanted; Kafka deletes an
    entity with no values left)."""
    changes = []
    for entity in sorted(set(current) | set(wanted)):
        have, want = current.get(entity, {}), wanted.get(entity, {})
        for key in sorted(set(have) | set(want)):
            if key not in want:
                changes.append(Change(entity, key, None))
            elif have.get(key) != want[key]:
                changes.append(Change(entity, key, want[key]))
    return changes


def plan(baseline: Mapping[Entity, Mapping[str, float]], current: Mapping[Entity, Mapping[str, float]],
         factor: float, policy: Policy) -> list[Change]:
    """What to alter now so that the cluster enforces `factor` over `baseline`. Exemptions go first: a throttle
    must never reach the pipeline's own publisher before its exemption does."""
    return sorted(diff(current, target(baseline, factor, policy)), key=lambda c: c.value != UNLIMITED)


def phases(changes: list[Change], base: Mapping[Entity, Mapping[str, float]]) -> list[list[Change]]:
    """The changes as AlterClientQuotas requests to send in order. A broker applies the entries of one request
    in no particular order (one metadata delta, keyed by entity): seen on Kafka 4.1, the publisher's client id
    got a 1 byte/s throttle from a request that also granted its exemption. So exemptions are granted in a
    request of their own before any throttle, and withdrawn (from `base`) only after everything else."""
    grants = [c for c in changes if c.value == UNLIMITED]
    withdrawals = [c for c in changes if c.value is None and _get(base, c.entity, c.key) == UNLIMITED]
    rest = [c for c in changes if c not in grants and c not in withdrawals]
    return [batch for batch in (grants, rest, withdrawals) if batch]


def _get(quotas: Mapping[Entity, Mapping[str, float]], entity: Entity, key: str) -> float | None:
    return quotas.get(entity, {}).get(key)


@dataclass(frozen=True)
class Observed:
    """A describe result read against what the enforcer last wrote."""

    believed: Quotas  # the state to plan from: lagging values replaced by what was written
    operator: list[Change]  # values someone else changed: the operator's edits
    lagging: list[tuple[Entity, str]]  # values Describe does not show yet


def tell_edits_from_lag(current: Mapping[Entity, Mapping[str, float]], applied: Mapping[Entity, Mapping[str, float]],
                        recent: Iterable[Mapping[Entity, Mapping[str, float]]]) -> Observed:
    """Tell the operator's edits from read-after-write lag. A value that differs from what was last written
    but equals what a recent write replaced is lag (Kafka 4.0 shows a change a moment after it commits);
    any other difference is an edit made by someone else."""
    recent = list(recent)
    believed: Quotas = {e: dict(v) for e, v in current.items()}
    operator: list[Change] = []
    lagging: list[tuple[Entity, str]] = []
    for entity in sorted(set(current) | set(applied)):
        for key in sorted(set(current.get(entity, {})) | set(applied.get(entity, {}))):
            now, wrote = _get(current, entity, key), _get(applied, entity, key)
            if now == wrote:
                continue
            if any(_get(r, entity, key) == now for r in recent):
                lagging.append((entity, key))
                if wrote is None:
                    believed[entity].pop(key, None)
                    if not believed[entity]:
                        del believed[entity]
                else:
                    believed.setdefault(entity, {})[key] = wrote
            else:
                operator.append(Change(entity, key, now))
    return Observed(believed, operator, lagging)


def adopt(baseline: Mapping[Entity, Mapping[str, float]], edits: Iterable[Change]) -> Quotas:
    """The baseline with the operator's edits taken as the new unthrottled values."""
    out: Quotas = {e: dict(v) for e, v in baseline.items()}
    for change in edits:
        if change.value is None:
            values = out.get(change.entity)
            if values is not None:
                values.pop(change.key, None)
                if not values:
                    del out[change.entity]
        else:
            out.setdefault(change.entity, {})[change.key] = change.value
    return out
