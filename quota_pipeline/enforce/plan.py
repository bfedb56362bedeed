"""Enforcement on stock Kafka as pure functions: throttled target quotas, the changes to get there, operator edits."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from quota_pipeline.core.stop import StopLimit
from quota_pipeline.kafka.quota_admin import Change
from quota_pipeline.kafka.client_quotas import CLIENT_ID, IP, PRODUCER_BYTE_RATE, UNLIMITED, USER, Entity, Quotas

# The lowest precedence level: it applies to exactly the clients no other entity gives a produce quota.
CATCH_ALL = Entity.of(default_client_id=True)
# The highest default level without a named client id: at factor 0 the floor goes here, on a new window.
FRESH_DEFAULT = Entity.of(default_user=True, default_client_id=True)


def throttle_floor(stop: StopLimit) -> float:
    """Each client's produce quota at factor 0 under `--stop throttle` (a whole number, as Kafka's
    producer_byte_rate): the stop limit at the longest mute from the start. The enforcer changes quotas through the metadata log, not on every request, so it
    does not lengthen the mute as the callback does: a client is back within the max mute after any stop."""
    return float(max(1, math.floor(stop.limit(math.inf))))


DEFAULT_THROTTLE_FLOOR = throttle_floor(StopLimit())


@dataclass(frozen=True)
class Policy:
    """What the enforcer needs from the Strimzi properties."""

    excluded_users: frozenset[str]  # principal names, "User:" removed
    produce_base: float | None  # client.quota.callback.static.produce: the base of clients with no produce quota
    produce_floor: float = DEFAULT_THROTTLE_FLOOR  # throttle_floor(): from quota.pipeline.throttle.max.mute

    @classmethod
    def of(cls, excluded_principals: Iterable[str], produce: float | None,
           produce_floor: float = DEFAULT_THROTTLE_FLOOR) -> "Policy":
        """No exemption by client id: any client can name itself anything, so a client id proves nothing."""
        return cls(frozenset(p[len("User:"):] if p.startswith("User:") else p for p in excluded_principals), produce,
                   produce_floor)


def scaled(value: float, factor: float, floor: float = 1.0) -> float:
    """value x factor as a whole number (producer_byte_rate is a LONG in Kafka; rounded down, never above), not below
    the floor, and the floor never above the value (a throttle never raises a quota); at least 1."""
    return float(max(1, math.floor(max(min(value, floor), value * factor))))


def applies_to_producers(entity: Entity) -> bool:
    return not entity.has(IP) and (entity.has(USER) or entity.has(CLIENT_ID))


def names_excluded_user(entity: Entity, policy: Policy) -> bool:
    return entity.has(USER) and entity.name(USER) in policy.excluded_users


def _users_with_own_quota(baseline: Mapping[Entity, Mapping[str, float]]) -> list[str]:
    """Users with a produce quota on `user=U`."""
    return sorted({e.name(USER) for e, v in baseline.items() if PRODUCER_BYTE_RATE in v and e.has(USER)
                   and e.name(USER) is not None and not e.has(IP) and not e.has(CLIENT_ID)})


def _whole_client(entity: Entity) -> bool:
    """A level that names both a user (or <default>) and a client id (or <default>): Kafka's sensor tags of such a
    level are (user, client id) already, so no level above it can give its clients a new window."""
    return entity.has(USER) and entity.has(CLIENT_ID)


def target(baseline: Mapping[Entity, Mapping[str, float]], factor: float, policy: Policy) -> Quotas:
    """The quotas that make every non-excluded client's effective produce quota its base x factor, floored.

    - factor >= 1: the baseline itself.
    - 0 < factor < 1: every user / client-id / user+client-id entity (named or default) with a producer_byte_rate,
      except those naming an excluded user or client id, gets that value scaled (`scaled`: floored at
      quota.pipeline.produce.quota.floor, never raised). Scaling in place keeps the winning level of every client,
      so each client's effective quota is its own baseline quota scaled. Clients with no produce quota at any level
      get the produce base (P+produce) scaled on `client-id=<default>`; without P+produce they stay unlimited.
    - factor 0: every client is moved to the floor **on a new quota window**. Kafka charges a throttle against the
      bytes the client's sensor still holds, so a cut on the sensor in use mutes a producer for about
      (base / floor) x 11 s, long past the release (docs/studies.md, "How to apply a factor of 0 ...").
      A sensor is named by the tags of the level that gives the quota, so the floor goes on levels above the
      baseline's: `user=<default>, client-id=<default>` (tags: user and client id) outranks `user=<default>`, every
      `client-id` level and `client-id=<default>`, and `user=U, client-id=<default>` outranks a `user=U` quota.
      Those outranked levels keep their baseline values (the release then only deletes the floor). Levels naming
      a user and a client id already have those tags: they are floored in place (the one case still charged for
      earlier bytes).
    - excluded users: `user=<name>` gets producer_byte_rate = Long.MAX_VALUE (Kafka's unlimited) when the
      baseline sets none there, so no default can throttle them; entities naming them keep their values.
    """
    out: Quotas = {e: dict(v) for e, v in baseline.items()}
    if factor >= 1.0:
        return out
    floor = policy.produce_floor
    stop = factor <= 0.0
    for entity, values in out.items():
        if (PRODUCER_BYTE_RATE in values and applies_to_producers(entity) and not names_excluded_user(entity, policy)
                and (not stop or _whole_client(entity))):
            values[PRODUCER_BYTE_RATE] = scaled(values[PRODUCER_BYTE_RATE], factor, floor)
    if stop:
        fresh = [FRESH_DEFAULT] + [Entity.of(u, default_client_id=True) for u in _users_with_own_quota(baseline)
                                   if u not in policy.excluded_users]
        for entity in fresh:
            if PRODUCER_BYTE_RATE not in baseline.get(entity, {}):
                out.setdefault(entity, {})[PRODUCER_BYTE_RATE] = scaled(_base_of(entity, baseline, policy), 0.0, floor)
    elif PRODUCER_BYTE_RATE not in baseline.get(CATCH_ALL, {}) and policy.produce_base is not None:
        out.setdefault(CATCH_ALL, {})[PRODUCER_BYTE_RATE] = scaled(policy.produce_base, factor, floor)
    for entity in [Entity.of(user) for user in sorted(policy.excluded_users)]:
        if PRODUCER_BYTE_RATE not in baseline.get(entity, {}):
            out.setdefault(entity, {})[PRODUCER_BYTE_RATE] = UNLIMITED
    return out


def _base_of(entity: Entity, baseline: Mapping[Entity, Mapping[str, float]], policy: Policy) -> float:
    """The quota a floor entity's clients had: `user=U`'s for `user=U, client-id=<default>`; for the defaults the
    produce base (P+produce, else unlimited), so the floor never raises a smaller base."""
    user = entity.name(USER)
    if user is not None:
        return baseline[Entity.of(user)][PRODUCER_BYTE_RATE]
    return UNLIMITED if policy.produce_base is None else policy.produce_base


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
    must never reach an excluded principal before its exemption does."""
    return sorted(diff(current, target(baseline, factor, policy)), key=lambda c: c.value != UNLIMITED)


def phases(changes: list[Change], base: Mapping[Entity, Mapping[str, float]]) -> list[list[Change]]:
    """The changes as AlterClientQuotas requests to send in order. A broker applies the entries of one request
    in no particular order (one metadata delta, keyed by entity): seen on Kafka 4.1, an exempted client got a
    1 byte/s throttle from a request that also granted its exemption. So exemptions are granted in a
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
