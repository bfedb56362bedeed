"""The plan: the moves, each with its why, and per log dir what it needs and what the moves give it; as JSON too."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INTRA, CROSS = "intra-broker", "cross-broker"
FORMAT_VERSION = 1


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
        return cls(str(raw["topic"]), int(raw["partition"]), int(raw["size_bytes"]),
                   float(raw["growth_bytes_per_second"]),
                   (int(raw["from"]["broker"]), str(raw["from"]["log_dir"])),
                   (int(raw["to"]["broker"]), str(raw["to"]["log_dir"])),
                   tuple(int(b) for b in raw["replicas_before"]), tuple(int(b) for b in raw["replicas_after"]),
                   float(raw["duration_seconds"]), str(raw["why"]))


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
        def num(v: Any) -> float:
            return math.inf if v is None else float(v)
        return cls(int(raw["broker"]), str(raw["log_dir"]), str(raw["why"]), raw["available_bytes"],
                   raw["total_bytes"], num(raw["limit_bytes"]), num(raw["goal_bytes"]), int(raw["freed_bytes"]),
                   None if raw["available_after_bytes"] is None else float(raw["available_after_bytes"]),
                   bool(raw["resolved"]), str(raw["note"]), tuple(raw.get("suggestions") or ()))


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


@dataclass(frozen=True)
class Plan:
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
    def from_json(cls, raw: dict[str, Any]) -> "Plan":
        if raw.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unknown plan format_version {raw.get('format_version')!r}")
        return cls(str(raw["cluster"]), float(raw["throttle_bytes_per_second"]), str(raw["margin"]),
                   tuple(DirPlan.from_json(d) for d in raw["dirs"]), tuple(Move.from_json(m) for m in raw["moves"]),
                   tuple(Skipped(**s) for s in raw.get("skipped") or ()), bool(raw.get("cordon")))


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
