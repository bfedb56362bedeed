"""The configs a plan sets while it runs (replication throttles, the cordon) and how it takes back exactly its own:
a value only where none was set, list entries only where absent; at the end only what still is what it set."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from quota_pipeline.core.display import visible
from quota_pipeline.remedy.gather import CORDON_KEY
from quota_pipeline.remedy.plan import CROSS, INTRA, Forbidden, MovePlan, field_of, strs_of

BROKER, TOPIC = "broker", "topic"
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
INTRA_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
SET_SOURCES = ("DYNAMIC_BROKER_CONFIG", "DYNAMIC_TOPIC_CONFIG")
RATES, REPLICA_LISTS = (LEADER_RATE, FOLLOWER_RATE, INTRA_RATE), (LEADER_REPLICAS, FOLLOWER_REPLICAS)
# Every config remedy ever sets, by the kind of resource it sets it on: a Setting can be nothing else, so no state
# file can make it set (or take back) retention, min.insync.replicas or any other config.
KEYS = {BROKER: (*RATES, CORDON_KEY), TOPIC: REPLICA_LISTS}
NAMES = {BROKER: re.compile(r"0|[1-9][0-9]{0,9}"), TOPIC: re.compile(r"[A-Za-z0-9._-]{1,249}")}
RATE = re.compile(r"[1-9][0-9]{0,18}")  # bytes/s, a whole number: what wanted() writes
REPLICA = re.compile(r"(0|[1-9][0-9]{0,9}):(0|[1-9][0-9]{0,9})")  # partition:broker, never `*`
Current = Mapping[tuple[str, str], Mapping[str, tuple[str | None, str]]]  # (kind, name) -> key -> (value, source)


@dataclass(frozen=True)
class Setting:
    """One config on one resource: a whole value, or (`entries`) items of a comma-separated list."""

    kind: str
    name: str
    key: str
    value: str = ""
    entries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        what = f"{visible(self.key)} on {visible(self.kind)} {visible(self.name)}"
        if self.key not in KEYS.get(self.kind, ()):
            raise Forbidden(f"asks for {what}, which remedy never sets")
        if not NAMES[self.kind].fullmatch(self.name):
            raise Forbidden(f"asks for {what}, which is not a {self.kind} name")
        if self.key in RATES:
            if self.entries or not RATE.fullmatch(self.value):
                raise Forbidden(f"asks for {visible(str(self))}, which is not a rate remedy writes "
                                "(a whole number of bytes/s, 1 or more)")
        elif self.value or not self.entries or not all(
                REPLICA.fullmatch(e) if self.key in REPLICA_LISTS else e and "," not in e for e in self.entries):
            form = "partition:broker entries" if self.key in REPLICA_LISTS else "log dirs"
            raise Forbidden(f"asks for {visible(str(self))}, which is not a list of {form} remedy writes")

    @property
    def resource(self) -> tuple[str, str]:
        return self.kind, self.name

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "key": self.key, "value": self.value,
                "entries": list(self.entries)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "Setting":
        return cls(field_of(raw, "kind", str), field_of(raw, "name", str), field_of(raw, "key", str),
                   field_of(raw, "value", str, optional=True) or "", strs_of(raw, "entries"))

    def __str__(self) -> str:
        what = f"{self.key}+={','.join(self.entries)}" if self.entries else f"{self.key}={self.value}"
        return f"{self.kind} {self.name}: {what}"


def wanted(plan: MovePlan) -> list[Setting]:
    """What the plan needs set: per moved topic the throttled replicas (leader side: the replicas it has, follower
    side: the one it gains), the rates on every broker involved, the intra-broker copy rate, the cordon."""
    rate = str(int(plan.rate))
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    brokers: set[int] = set()
    copying: set[int] = set()
    for m in plan.moves:
        if m.kind == CROSS:
            leaders.setdefault(m.topic, []).extend(f"{m.partition}:{b}" for b in m.replicas_before)
            followers.setdefault(m.topic, []).append(f"{m.partition}:{m.target[0]}")
            brokers.update(m.replicas_before + (m.target[0],))
        elif m.kind == INTRA:
            copying.add(m.source[0])
    out = [Setting(TOPIC, t, LEADER_REPLICAS, entries=tuple(dict.fromkeys(e))) for t, e in sorted(leaders.items())]
    out += [Setting(TOPIC, t, FOLLOWER_REPLICAS, entries=tuple(dict.fromkeys(e))) for t, e in sorted(followers.items())]
    out += [Setting(BROKER, str(b), key, rate) for b in sorted(brokers) for key in (LEADER_RATE, FOLLOWER_RATE)]
    out += [Setting(BROKER, str(b), INTRA_RATE, rate) for b in sorted(copying)]
    if plan.cordon:
        dirs: dict[int, list[str]] = {}
        for m in plan.moves:
            dirs.setdefault(m.source[0], []).append(m.source[1])
        out += [Setting(BROKER, str(b), CORDON_KEY, entries=tuple(dict.fromkeys(p))) for b, p in sorted(dirs.items())]
    return out


def _entries(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


def ours_to_set(want: list[Setting], current: Current) -> list[Setting]:
    """The part of `want` that is free to take: a value nobody set, list entries not there yet (a `*` list throttles
    every replica already). What someone else set is left as it is, and never taken back."""
    ours = []
    for s in want:
        value, source = current.get(s.resource, {}).get(s.key, (None, ""))
        if s.entries:
            present = _entries(value) if source in SET_SOURCES else []
            missing = tuple(e for e in s.entries if e not in present)
            if missing and "*" not in present:
                ours.append(Setting(s.kind, s.name, s.key, entries=missing))
        elif source not in SET_SOURCES or value is None:  # an equal value someone set is still theirs
            ours.append(s)
    return ours


def to_apply(ours: list[Setting], current: Current) -> list[tuple[str, str, str, str, str | None]]:
    """IncrementalAlterConfigs changes for what is ours and not in place yet (a re-run applies only what is missing)."""
    changes = []
    for s in ours:
        value, source = current.get(s.resource, {}).get(s.key, (None, ""))
        if s.entries:
            missing = [e for e in s.entries if e not in _entries(value if source in SET_SOURCES else None)]
            if missing:
                changes.append((s.kind, s.name, s.key, "APPEND", ",".join(missing)))
        elif not (source in SET_SOURCES and value == s.value):
            changes.append((s.kind, s.name, s.key, "SET", s.value))
    return changes


def to_remove(ours: list[Setting], current: Current) -> list[tuple[str, str, str, str, str | None]]:
    """Changes that take back what is ours: a value still equal to what it set, the list entries it added that are
    still there (the whole config when nothing else is in the list). A value someone changed since stays theirs."""
    changes = []
    for s in ours:
        value, source = current.get(s.resource, {}).get(s.key, (None, ""))
        if source not in SET_SOURCES:
            continue
        if s.entries:
            there = [e for e in s.entries if e in _entries(value)]
            if there and set(_entries(value)) <= set(there):  # only ours left: Kafka keeps an empty list set
                changes.append((s.kind, s.name, s.key, "DELETE", None))
            elif there:
                changes.append((s.kind, s.name, s.key, "SUBTRACT", ",".join(there)))
        elif value == s.value:
            changes.append((s.kind, s.name, s.key, "DELETE", None))
    return changes


def resources(settings: list[Setting]) -> tuple[list[tuple[str, str]], list[str]]:
    """The resources and keys to describe to know the current values of `settings`."""
    return sorted({s.resource for s in settings}), sorted({s.key for s in settings})
