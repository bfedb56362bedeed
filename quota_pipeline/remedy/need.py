"""Which log dirs need a plan and how many available bytes each must reach: the configured limits, read once."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from quota_pipeline.core.config import Limit, Limits
from quota_pipeline.core.reference.policy import PY, limit_bytes
from quota_pipeline.remedy.inputs import Dir

SOFT, HARD, PREDICTIVE, OFFLINE = "soft", "hard", "predictive", "offline"
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(%|[kKMGT]i?B?|B)?\s*")
_UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "M": 10 ** 6, "MB": 10 ** 6, "G": 10 ** 9, "GB": 10 ** 9,
          "T": 10 ** 12, "TB": 10 ** 12, "KI": 2 ** 10, "KIB": 2 ** 10, "MI": 2 ** 20, "MIB": 2 ** 20,
          "GI": 2 ** 30, "GIB": 2 ** 30, "TI": 2 ** 40, "TIB": 2 ** 40}


@dataclass(frozen=True)
class Margin:
    """How far above its limit a plan brings a dir: bytes, or a share of the dir's total size."""

    kind: str  # "bytes" | "ratio"
    value: float

    def bytes_for(self, d: Dir) -> float:
        return self.value if self.kind == "bytes" else self.value * (d.total or 0)

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.kind == "ratio" else f"{int(self.value)} B"


def parse_size(text: str, percent: bool = False) -> Margin:
    """`64MiB`, `1GB`, `1048576` (bytes) or, with `percent`, `5%`; ValueError with what is accepted."""
    m = _SIZE.fullmatch(text)
    unit = (m.group(2) or "") if m else ""
    if not m or (unit == "%" and not percent) or (unit != "%" and unit.upper() not in _UNITS):
        raise ValueError(f"not a size: {text!r} (bytes like 1048576, 64MiB or 1GB{', or a share like 5%' if percent else ''})")
    value = float(m.group(1))
    if unit == "%":
        if value >= 100:
            raise ValueError(f"a margin of {text} leaves no room: give less than 100%")
        return Margin("ratio", value / 100)
    return Margin("bytes", float(math.floor(value * _UNITS[unit.upper()])))


@dataclass(frozen=True)
class Need:
    """A dir the plan must bring back: to `goal` available bytes, `why` being the limit it is at or past."""

    dir: Dir
    why: str  # SOFT | HARD | PREDICTIVE | OFFLINE
    limit_bytes: float  # the limit's available bytes for this dir (soft, else hard)
    goal: float  # available bytes it must have once the plan is done
    eta_seconds: float | None = None

    @property
    def short(self) -> float:
        """Bytes missing to the goal now (growth during the moves comes on top)."""
        return 0.0 if self.dir.offline else max(0.0, self.goal - self.dir.available)  # type: ignore[operator]


def floor_limit(limits: Limits) -> tuple[Limit, str]:
    """The limit a plan keeps every dir above: the soft limit, or the hard one when no soft limit is set."""
    return (limits.soft, SOFT) if limits.soft is not None else (limits.hard, HARD)


def goal_bytes(d: Dir, limits: Limits, margin: Margin) -> float:
    """Available bytes a dir must keep: its limit (soft, else hard) plus the margin. Also what a target may not
    fall below."""
    limit, _ = floor_limit(limits)
    return float(limit_bytes(limit, d.total or 0, PY)) + margin.bytes_for(d)


def need_of(d: Dir, limits: Limits, margin: Margin, horizon_seconds: float) -> Need | None:
    """The dir's need, None when it is above its limit and (with a horizon) further than it from the hard limit."""
    limit, kind = floor_limit(limits)
    if d.offline:
        return Need(d, OFFLINE, math.inf, math.inf)
    at = float(limit_bytes(limit, d.total, PY))
    goal = at + margin.bytes_for(d)
    if d.available <= at:
        return Need(d, kind, at, goal)
    hard = float(limit_bytes(limits.hard, d.total, PY))
    if horizon_seconds > 0 and d.growth > 0:
        eta = max(0.0, (d.available - hard) / d.growth)
        if eta <= horizon_seconds:
            # Back outside the horizon: the headroom to the hard limit must outlast it at the current fill rate.
            return Need(d, PREDICTIVE, at, max(goal, hard + d.growth * horizon_seconds + margin.bytes_for(d)), eta)
    return None


def needs(dirs: tuple[Dir, ...], limits: Limits, margin: Margin, horizon_seconds: float) -> list[Need]:
    """Every dir that needs a plan, the furthest past its goal first (offline ones last: nothing can be read)."""
    found = [n for n in (need_of(d, limits, margin, horizon_seconds) for d in dirs) if n is not None]
    return sorted(found, key=lambda n: (n.why == OFFLINE, -n.short, n.dir.broker, n.dir.path))
