"""Simulated client quotas: DescribeClientQuotas and AlterClientQuotas, validated as Kafka's controller does."""
from __future__ import annotations

import ipaddress
import threading
import time
from typing import Any, Callable

from kafka.protocol.admin import (
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
)

from quota_pipeline.kafka.client_quotas import (
    CLIENT_ID, CLIENT_KEYS, INT_KEYS, IP, IP_KEYS, LONG_KEYS, LONG_MAX, USER, Entity, Quotas,
)

NONE = 0
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
INT_MAX = float(2**31 - 1)


class QuotaError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class ClientQuotaStore:
    """The cluster's quota entities. `visibility_lag` (seconds) delays what Describe shows after an Alter,
    like Kafka 4.0 brokers that learn a change from the metadata log a moment after the controller commits it."""

    def __init__(self, visibility_lag: float = 0.0, clock: Callable[[], float] = time.monotonic):
        self.visibility_lag = visibility_lag
        self._clock = clock
        self._lock = threading.Lock()
        self._committed: Quotas = {}
        self._visible: Quotas = {}
        self._pending: list[tuple[float, Entity, str, float | None]] = []

    # ---- Python access (tests, scenario setup) ---------------------------------------------------

    def snapshot(self, visible: bool = False) -> Quotas:
        """A copy of every entity's values: committed (what the brokers enforce) or what Describe shows now."""
        with self._lock:
            self._catch_up()
            source = self._visible if visible else self._committed
            return {e: dict(v) for e, v in source.items()}

    def set(self, entity: Entity, key: str, value: float | None) -> None:
        """Set (or with None remove) one value without validation or lag."""
        with self._lock:
            self._catch_up()
            for target in (self._committed, self._visible):
                _apply(target, entity, key, value)

    # ---- protocol -------------------------------------------------------------------------------

    def describe(self, components: list[Any], strict: bool) -> Quotas:
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for c in components:
            if not c.entity_type:
                raise QuotaError(INVALID_REQUEST, "Invalid empty entity type.")
            if c.entity_type in exact or c.entity_type in typed:
                raise QuotaError(INVALID_REQUEST, f"Entity type {c.entity_type} cannot appear more than once in the filter.")
            if c.entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaError(UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}")
            if c.match_type == MATCH_EXACT:
                exact[c.entity_type] = c.match
            elif c.match_type == MATCH_DEFAULT:
                exact[c.entity_type] = None
            elif c.match_type == MATCH_SPECIFIED:
                typed.add(c.entity_type)
            else:
                raise QuotaError(INVALID_REQUEST, f"Unexpected match type {c.match_type}")
        if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
            raise QuotaError(INVALID_REQUEST, "Invalid entity filter component combination. IP filter component "
                                              "should not be used with user or clientId filter component.")
        with self._lock:
            self._catch_up()
            return {e: dict(v) for e, v in self._visible.items() if _matches(e, exact, typed, strict)}

    def alter(self, entries: list[tuple[Entity | None, list[tuple[str, float | None]]]],
              validate_only: bool) -> list[tuple[int, str | None]]:
        """Apply entries atomically (each valid entry's records, as the controller does); one error per entry.
        An entry's entity is None when the request repeated an entity type (invalid before it is an entity)."""
        results: list[tuple[int, str | None]] = []
        records: list[tuple[Entity, str, float | None]] = []
        seen: set[Entity] = set()
        with self._lock:
            for entity, ops in entries:
                try:
                    if entity is None:
                        raise QuotaError(INVALID_REQUEST, "Invalid client quota entity, duplicate entity entry")
                    if entity in seen:
                        raise QuotaError(INVALID_REQUEST, f"Ignoring duplicate entity {entity}")
                    seen.add(entity)
                    records.extend(self._validate(entity, ops))
                    results.append((NONE, None))
                except QuotaError as exc:
                    results.append((exc.code, str(exc)))
            if not validate_only:
                due = self._clock() + self.visibility_lag
                for entity, key, value in records:
                    _apply(self._committed, entity, key, value)
                    if self.visibility_lag > 0:
                        self._pending.append((due, entity, key, value))
                    else:
                        _apply(self._visible, entity, key, value)
        return results

    def _validate(self, entity: Entity, ops: list[tuple[str, float | None]]) -> list[tuple[Entity, str, float | None]]:
        parts = entity.mapping()
        if not parts:
            raise QuotaError(INVALID_REQUEST, "Invalid empty client quota entity")
        for entity_type, name in parts.items():
            if entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaError(INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
            if name is not None and name == "":
                raise QuotaError(INVALID_REQUEST, f"Empty {entity_type} not supported")
        if IP in parts:
            if USER in parts or CLIENT_ID in parts:
                raise QuotaError(INVALID_REQUEST, "Invalid quota entity combination, IP entity shouldnot be "
                                                  "combined with User or ClientId")
            if not _valid_ip(parts[IP]):
                raise QuotaError(INVALID_REQUEST, f"{parts[IP]} is not a valid IP or resolvable host.")
            keys = IP_KEYS
        else:
            keys = CLIENT_KEYS
        keyed: dict[str, float | None] = {}
        for key, value in ops:
            if key in keyed:
                raise QuotaError(INVALID_REQUEST, f"Duplicate quota key {key} not updating quota for this entity {entity}")
            keyed[key] = value
        current = self._committed.get(entity, {})
        records = []
        for key, value in keyed.items():
            if value is None:
                if key in current:
                    records.append((entity, key, None))
                continue
            _check_value(keys, key, value)
            if current.get(key) != value:
                records.append((entity, key, value))
        return records

    def _catch_up(self) -> None:
        now = self._clock()
        while self._pending and self._pending[0][0] <= now:
            _, entity, key, value = self._pending.pop(0)
            _apply(self._visible, entity, key, value)


def _check_value(keys: tuple[str, ...], key: str, value: float) -> None:
    if key not in keys:
        raise QuotaError(INVALID_REQUEST, f"Invalid configuration key {key}")
    if value <= 0.0:
        raise QuotaError(INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if key in LONG_KEYS and value > LONG_MAX:
        raise QuotaError(INVALID_REQUEST, f"Proposed value for {key} is too large for a LONG.")
    if key in INT_KEYS and value > INT_MAX:
        raise QuotaError(INVALID_REQUEST, f"Proposed value for {key} is too large for an INT.")
    if (key in LONG_KEYS or key in INT_KEYS) and abs(value % 1.0) > 1e-6:
        raise QuotaError(INVALID_REQUEST, f"{key} cannot be a fractional value.")


def _valid_ip(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name == "localhost"  # Kafka accepts resolvable host names; the simulator resolves none other


def _apply(quotas: Quotas, entity: Entity, key: str, value: float | None) -> None:
    if value is None:
        values = quotas.get(entity)
        if values is not None:
            values.pop(key, None)
            if not values:
                del quotas[entity]  # an entity with no values left is gone, as in Kafka
    else:
        quotas.setdefault(entity, {})[key] = float(value)


def _matches(entity: Entity, exact: dict[str, str | None], typed: set[str], strict: bool) -> bool:
    parts = entity.mapping()
    if strict and len(parts) != len(exact) + len(typed):
        return False
    if any(t not in parts or parts[t] != name for t, name in exact.items()):
        return False
    return all(t in parts for t in typed)


# ---- wire --------------------------------------------------------------------------------------

def describe_response(store: ClientQuotaStore, request: Any, v: int) -> Any:
    try:
        found = store.describe(list(request.components or []), bool(request.strict))
    except QuotaError as exc:
        return DescribeClientQuotasResponse(version=v, throttle_time_ms=0, error_code=exc.code,
                                            error_message=str(exc), entries=None)
    Entry = DescribeClientQuotasResponse.EntryData
    entries = [Entry(version=v,
                     entity=[Entry.EntityData(version=v, entity_type=t, entity_name=n) for t, n in e.parts],
                     values=[Entry.ValueData(version=v, key=k, value=val) for k, val in sorted(vals.items())])
               for e, vals in sorted(found.items())]
    return DescribeClientQuotasResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None,
                                        entries=entries)


def alter_response(store: ClientQuotaStore, request: Any, v: int) -> Any:
    parsed: list[tuple[Entity | None, list[tuple[str, float | None]]]] = []
    for entry in request.entries or []:
        types = [c.entity_type for c in entry.entity]
        entity = None if len(set(types)) != len(types) else \
            Entity.from_mapping({c.entity_type: c.entity_name for c in entry.entity})
        parsed.append((entity, [(op.key, None if op.remove else float(op.value)) for op in entry.ops]))
    results = store.alter(parsed, bool(request.validate_only))
    Entry = AlterClientQuotasResponse.EntryData
    entries = [Entry(version=v, error_code=code, error_message=message,
                     entity=[Entry.EntityData(version=v, entity_type=c.entity_type, entity_name=c.entity_name)
                             for c in req.entity])
               for req, (code, message) in zip(request.entries or [], results)]
    return AlterClientQuotasResponse(version=v, throttle_time_ms=0, entries=entries)


REQUESTS = {DescribeClientQuotasRequest.API_KEY: DescribeClientQuotasRequest,
            AlterClientQuotasRequest.API_KEY: AlterClientQuotasRequest}
RESPONDERS = {DescribeClientQuotasRequest.API_KEY: describe_response,
              AlterClientQuotasRequest.API_KEY: alter_response}
