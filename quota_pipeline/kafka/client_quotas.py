"""Client-quota entities (KIP-546) and Kafka's eight-level precedence, as pure functions."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
DEFAULT_NAME = "<default>"  # how kafka-configs.sh shows a default entity; on the wire it is a null name

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
CLIENT_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
IP_KEYS = (CONNECTION_CREATION_RATE,)
# Kafka's config types: LONG keys must be whole numbers on the wire (ClientQuotaControlManager).
LONG_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
INT_KEYS = frozenset({CONNECTION_CREATION_RATE})
LONG_MAX = float(2**63 - 1)  # what Java's `value > Long.MAX_VALUE` compares against (a double)
UNLIMITED = LONG_MAX  # Kafka's own "unlimited" client quota is Long.MaxValue


@dataclass(frozen=True)
class Entity:
    """A quota entity: sorted (type, name) pairs; a None name is the type's default entity."""

    parts: tuple[tuple[str, str | None], ...]

    def sort_key(self) -> tuple[Any, ...]:
        # Defaults before names, fewer types first: the order kafka-configs.sh users expect to read.
        return (len(self.parts), tuple((t, n is not None, n or "") for t, n in self.parts))

    def __lt__(self, other: "Entity") -> bool:
        return self.sort_key() < other.sort_key()

    @classmethod
    def of(cls, user: str | None = None, client_id: str | None = None, *, default_user: bool = False,
           default_client_id: bool = False, ip: str | None = None) -> "Entity":
        parts: dict[str, str | None] = {}
        if default_user or user is not None:
            parts[USER] = None if default_user else user
        if default_client_id or client_id is not None:
            parts[CLIENT_ID] = None if default_client_id else client_id
        if ip is not None:
            parts[IP] = ip
        return cls.from_mapping(parts)

    @classmethod
    def from_mapping(cls, parts: Mapping[str, str | None]) -> "Entity":
        return cls(tuple(sorted(parts.items(), key=lambda kv: ENTITY_TYPES.index(kv[0])
                                if kv[0] in ENTITY_TYPES else len(ENTITY_TYPES))))

    def mapping(self) -> dict[str, str | None]:
        return dict(self.parts)

    def has(self, entity_type: str) -> bool:
        return entity_type in self.mapping()

    def name(self, entity_type: str) -> str | None:
        return self.mapping().get(entity_type)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.parts)

    def __str__(self) -> str:
        return ", ".join(f"{t}={DEFAULT_NAME if n is None else n}" for t, n in self.parts) or "(empty)"

    def to_json(self) -> dict[str, str | None]:
        """{"user": "alice", "client-id": null}: null is the default entity, as on the wire."""
        return self.mapping()

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Entity":
        return cls.from_mapping({str(k): (None if v is None else str(v)) for k, v in raw.items()})


Quotas = dict[Entity, dict[str, float]]


def quotas_to_json(quotas: Mapping[Entity, Mapping[str, float]]) -> list[dict[str, Any]]:
    return [{"entity": e.to_json(), "values": dict(sorted(v.items()))} for e, v in sorted(quotas.items())]


def quotas_from_json(raw: Iterable[Mapping[str, Any]]) -> Quotas:
    return {Entity.from_json(item["entity"]): {str(k): float(v) for k, v in item["values"].items()}
            for item in raw}


@dataclass(frozen=True)
class Level:
    """One of Kafka's eight precedence levels: which entity it reads for a given (user, client-id)."""

    name: str
    user: str  # "name" | "default" | "absent"
    client_id: str

    def entity(self, user: str, client_id: str) -> Entity:
        parts: dict[str, str | None] = {}
        if self.user != "absent":
            parts[USER] = user if self.user == "name" else None
        if self.client_id != "absent":
            parts[CLIENT_ID] = client_id if self.client_id == "name" else None
        return Entity.from_mapping(parts)


# Kafka's documented order (docs "Quotas": /config/users/<user>/clients/<client-id> first, ...,
# /config/clients/<default> last); ClientQuotaManager resolves it per quota type, i.e. per key.
LEVELS = (
    Level("user+client-id", "name", "name"),
    Level("user+default client-id", "name", "default"),
    Level("user", "name", "absent"),
    Level("default user+client-id", "default", "name"),
    Level("default user+default client-id", "default", "default"),
    Level("default user", "default", "absent"),
    Level("client-id", "absent", "name"),
    Level("default client-id", "absent", "default"),
)


@dataclass(frozen=True)
class Resolved:
    value: float | None  # None: unlimited (no level sets the key)
    level: str | None

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "level": self.level}


def resolve(quotas: Mapping[Entity, Mapping[str, float]], user: str, client_id: str, key: str) -> Resolved:
    """The effective value of one quota key for a client: the first level (in precedence) that sets it."""
    for level in LEVELS:
        values = quotas.get(level.entity(user, client_id))
        if values is not None and key in values:
            return Resolved(values[key], level.name)
    return Resolved(None, None)


def explain(quotas: Mapping[Entity, Mapping[str, float]], user: str, client_id: str,
            keys: Iterable[str] = CLIENT_KEYS) -> dict[str, Any]:
    """`quotas explain` as data: each key resolved on its own, and what every level holds."""
    return {
        "user": user,
        "client_id": client_id,
        "effective": {k: resolve(quotas, user, client_id, k).to_json() for k in keys},
        "levels": [
            {"level": lv.name, "entity": lv.entity(user, client_id).to_json(),
             "values": dict(sorted(quotas.get(lv.entity(user, client_id), {}).items()))}
            for lv in LEVELS
        ],
    }
