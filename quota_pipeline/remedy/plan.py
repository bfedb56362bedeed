"""The plan: the moves, each with its why, and per log dir what it needs and what the moves give it; as JSON too."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INTRA, CROSS = "intra-broker", "cross-broker"
FORMAT_VERSION = 1


class Forbidden(Exception):
    """A plan or its state asks for what remedy never does (the message says what, after the file's name). Not a
    ValueError: such a file is refused as asking for it, not reported as broken."""


def field_of(raw: Any, key: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    """`raw[key]` when it is of `kind` (a JSON number for float, never a bool), else ValueError naming the field."""
    if not isinstance(raw, dict):
        raise ValueError(f"{key}: expected an object, found {type(raw).__name__}")
    value = raw.get(key) if optional else raw[key]
    if value is None and optional:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:
        kinds = (*kinds, int)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ValueError(f"{key} is {value!r}, not {' or '.join(k.__name__ for k in kinds)}")
    return value


def ints_of(raw: Any, key: str) -> tuple[int, ...]:
    values = field_of(raw, key, list)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{key} is {values!r}, not a list of integers")
    return tuple(values)


def strs_of(raw: Any, key: str) -> tuple[str, ...]:
    values = field_of(raw, key, list, optional=True) or []
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"{key} is {values!r}, not a list of strings")
    return tuple(values)


def _where(raw: Any, key: str) -> tuple[int, str]:
    at = field_of(raw, key, dict)
    return field_of(at, "broker", int), field_of(at, "log_dir", str)


@dataclass(frozen=True)
class Move:
    """One replica from one log dir to another: on its broker (`INTRA`) or to another broker (`CROSS`)."""

    topic: str
    partition: int
    size: int
    growth: float  # bytes/s the partition grows at: it goes on filling wherever it is
    source: tuple[int, str]  # (broker, log dir)
    target: tuple[int, str]
    replicas_before: tuple[int, ...]
    replicas_after: tuple[int, ...]
    duration_seconds: float  # the expected length of its source dir's moves at the throttle rate
    why: str

    @property
    def kind(self) -> str:
        return INTRA if self.source[0] == self.target[0] else CROSS

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "kind": self.kind, "size_bytes": self.size,
                "growth_bytes_per_second": self.growth,
                "from": {"broker": self.source[0], "log_dir": self.source[1]},
                "to": {"broker": self.target[0], "log_dir": self.target[1]},
                "replicas_before": list(self.replicas_before), "replicas_after": list(self.replicas_after),
                "duration_seconds": self.duration_seconds, "why": self.why}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Move":
        return cls(field_of(raw, "topic", str), field_of(raw, "partition", int), field_of(raw, "size_bytes", int),
                   float(field_of(raw, "growth_bytes_per_second", float)), _where(raw, "from"), _where(raw, "to"),
                   ints_of(raw, "replicas_before"), ints_of(raw, "replicas_after"),
                   float(field_of(raw, "duration_seconds", float)), field_of(raw, "why", str))


@dataclass(frozen=True)
class DirPlan:
    """A log dir that needs the plan: where it is, where it must get to, what the moves bring it to."""

    broker: int
    log_dir: str
    why: str  # need.SOFT | HARD | PREDICTIVE | OFFLINE
    available: int | None
    total: int | None
    limit_bytes: float
    goal: float
    freed: int  # bytes the plan's moves take off it
    after: float | None  # available once the moves are done, its growth during them counted
    resolved: bool
    note: str  # why not resolved, or ""
    suggestions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "log_dir": self.log_dir, "why": self.why, "available_bytes": self.available,
                "total_bytes": self.total, "limit_bytes": _finite(self.limit_bytes), "goal_bytes": _finite(self.goal),
                "freed_bytes": self.freed, "available_after_bytes": _finite(self.after), "resolved": self.resolved,
                "note": self.note, "suggestions": list(self.suggestions)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "DirPlan":
        def num(key: str) -> float:
            value = field_of(raw, key, float, optional=True)
            return math.inf if value is None else float(value)
        after = field_of(raw, "available_after_bytes", float, optional=True)
        return cls(field_of(raw, "broker", int), field_of(raw, "log_dir", str), field_of(raw, "why", str),
                   field_of(raw, "available_bytes", int, optional=True), field_of(raw, "total_bytes", int, optional=True),
                   num("limit_bytes"), num("goal_bytes"), field_of(raw, "freed_bytes", int),
                   None if after is None else float(after), field_of(raw, "resolved", bool), field_of(raw, "note", str),
                   strs_of(raw, "suggestions"))


@dataclass(frozen=True)
class Skipped:
    """A replica on a dir that needs the plan which the plan leaves where it is, and why."""

    topic: str
    partition: int
    broker: int
    log_dir: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "broker": self.broker, "log_dir": self.log_dir,
                "why": self.why}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Skipped":
        return cls(field_of(raw, "topic", str), field_of(raw, "partition", int), field_of(raw, "broker", int),
                   field_of(raw, "log_dir", str), field_of(raw, "why", str))


@dataclass(frozen=True)
class MovePlan:
    """The replica moves that bring each full log dir of `cluster` back above its limit, at `rate`."""

    cluster: str
    rate: float  # bytes/s: the replication throttle, and the pace the durations assume
    margin: str
    dirs: tuple[DirPlan, ...] = ()
    moves: tuple[Move, ...] = ()
    skipped: tuple[Skipped, ...] = field(default=(), compare=False)
    cordon: bool = False  # cordon each source dir while the plan runs (KIP-1066)

    @property
    def moved_bytes(self) -> int:
        return sum(m.size for m in self.moves)

    def to_json(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "cluster": self.cluster, "throttle_bytes_per_second": self.rate,
                "margin": self.margin, "cordon": self.cordon, "moved_bytes": self.moved_bytes,
                "dirs": [d.to_json() for d in self.dirs], "moves": [m.to_json() for m in self.moves],
                "skipped": [s.to_json() for s in self.skipped]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "MovePlan":
        if field_of(raw, "format_version", int, optional=True) != FORMAT_VERSION:
            raise ValueError(f"unknown plan format_version {raw.get('format_version')!r}")
        return cls(field_of(raw, "cluster", str), float(field_of(raw, "throttle_bytes_per_second", float)),
                   field_of(raw, "margin", str), tuple(DirPlan.from_json(d) for d in field_of(raw, "dirs", list)),
                   tuple(Move.from_json(m) for m in field_of(raw, "moves", list)),
                   tuple(Skipped.from_json(s) for s in field_of(raw, "skipped", list, optional=True) or ()),
                   bool(field_of(raw, "cordon", bool, optional=True)))


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def human(n: float | None) -> str:
    """Bytes for people: 1.5 MiB, 12 GiB; `-` for unknown."""
    if n is None or math.isinf(n):
        return "-"
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
