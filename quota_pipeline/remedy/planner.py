"""The plan for a cluster view: per dir in need the fewest bytes, each replica to a dir of its own broker with room,
else to another broker's, never past a target's own limit, replicas on distinct brokers and as many racks."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from quota_pipeline.core.config import Limits
from quota_pipeline.remedy.inputs import ClusterView, Dir, Replica, TopicPartition
from quota_pipeline.remedy.need import OFFLINE, Margin, Need, goal_bytes, needs
from quota_pipeline.remedy.plan import DirPlan, Move, MovePlan, Skipped, human
from quota_pipeline.remedy.select import fewest_bytes


@dataclass
class Load:
    """What the plan sends to one target dir so far: bytes, their growth, and the longest move's duration."""

    bytes: int = 0
    growth: float = 0.0
    duration: float = 0.0


@dataclass
class Ledger:
    """The state the plan builds up as it goes from dir to dir."""

    view: ClusterView
    limits: Limits
    margin: Margin
    rate: float
    sources: frozenset[tuple[int, str]]
    loads: dict[tuple[int, str], Load] = field(default_factory=dict)
    assignments: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    taken: set[TopicPartition] = field(default_factory=set)


def target_after(d: Dir, load: Load, extra: Replica | None, duration: float) -> float:
    """A target's available bytes once its moves are done: less what they bring, less what it and they grow by
    over the longest of them."""
    size, growth = (extra.size, extra.growth) if extra else (0, 0.0)
    return d.available - load.bytes - size - (d.growth + load.growth + growth) * max(load.duration, duration)  # type: ignore[operator]


def distinct_racks(view: ClusterView, brokers: tuple[int, ...]) -> int:
    """Racks the brokers span; a broker without a rack counts as one of its own."""
    return len({view.racks.get(b) or f"broker-{b}" for b in brokers})


def targets(ledger: Ledger, r: Replica, duration: float) -> list[tuple[float, Dir]]:
    """Every dir that can take `r` (room left above its goal first), its own broker's before any other."""
    view = ledger.view
    replicas = ledger.assignments.get(r.tp, view.assignments.get(r.tp))
    out = []
    for d in view.dirs:
        if d.offline or d.key in ledger.sources or d.key == (r.broker, r.path) or d.broker not in view.racks:
            continue
        if d.broker != r.broker:
            if replicas is None:  # its replica set is not known: it can only move on its own broker
                continue
            after_set = tuple(d.broker if b == r.broker else b for b in replicas)
            if d.broker in replicas or distinct_racks(view, after_set) < distinct_racks(view, replicas):
                continue
        room = target_after(d, ledger.loads.get(d.key, Load()), r, duration) - goal_bytes(d, ledger.limits, ledger.margin)
        if room >= 0:
            out.append((room, d))
    return sorted(out, key=lambda x: (x[1].broker != r.broker, -x[0], x[1].broker, x[1].path))


def required_bytes(need: Need, rate: float) -> float:
    """Bytes to move off the dir: what it is short of its goal, plus what it fills by while they move at `rate`
    (it keeps filling until each move is done): B >= short + growth x B / rate."""
    g = need.dir.growth
    if need.short <= 0:
        return 0.0
    if g >= rate:
        return math.inf  # it fills faster than anything can leave it
    return math.ceil(need.short / (1 - g / rate))


def candidates(ledger: Ledger, d: Dir) -> tuple[list[Replica], list[Skipped]]:
    """The replicas on `d` the plan may move, and the others with why not."""
    view, moving = ledger.view, ledger.view.moving
    movable, skipped = [], []
    for r in sorted((r for r in view.replicas if (r.broker, r.path) == d.key and not r.future),
                    key=lambda r: (-r.size, r.topic, r.partition)):
        why = ("the decision topic: the decision depends on it" if r.topic in view.protected else
               "already being moved" if r.tp in moving else
               "moved from another dir by this plan" if r.tp in ledger.taken else
               "empty: moving it frees nothing" if r.size <= 0 else None)
        if why:
            skipped.append(Skipped(r.topic, r.partition, r.broker, r.path, why))
        else:
            movable.append(r)
    return movable, skipped


def plan(view: ClusterView, limits: Limits, margin: Margin, rate: float, horizon_seconds: float = 0.0) -> MovePlan:
    """The plan for every dir in need, the furthest from its goal first; later dirs see the room earlier ones took."""
    found = needs(view.dirs, limits, margin, horizon_seconds)
    ledger = Ledger(view, limits, margin, rate, frozenset(n.dir.key for n in found),
                    assignments=dict(view.assignments))
    dirs, moves, skipped = [], [], []
    for need in found:
        dir_plan, dir_moves, dir_skipped = plan_dir(ledger, need)
        dirs.append(dir_plan)
        moves += dir_moves
        skipped += dir_skipped
    cordon = view.cordon_supported and bool(moves)
    return MovePlan(view.cluster, rate, str(margin), tuple(dirs), tuple(moves), tuple(skipped), cordon)


def plan_dir(ledger: Ledger, need: Need) -> tuple[DirPlan, list[Move], list[Skipped]]:
    """The fewest bytes off one dir that targets can take: a replica no target can take leaves the pool and the
    choice is made again without it."""
    d = need.dir
    if need.why == OFFLINE:
        return dir_plan(need, 0, 0.0, False, "offline: Kafka cannot read it, so nothing can be moved off it", ()), [], []
    required = required_bytes(need, ledger.rate)
    pool, skipped = candidates(ledger, d)
    while True:
        estimate = min(required, sum(r.size for r in pool)) / ledger.rate
        placeable = [r for r in pool if targets(ledger, r, estimate)]
        skipped += [no_room(r) for r in pool if r not in placeable]
        pool = placeable
        chosen_at = fewest_bytes([r.size for r in pool], required) if not math.isinf(required) else None
        chosen = pool if chosen_at is None else [pool[i] for i in chosen_at]
        outcome = assign(ledger, chosen, need, required, len(pool))
        if isinstance(outcome, Replica):
            pool.remove(outcome)
            skipped.append(no_room(outcome))
            continue
        moves = outcome
        freed = sum(m.size for m in moves)
        duration = freed / ledger.rate
        after = d.available + freed - d.growth * duration  # type: ignore[operator]
        resolved = after >= need.goal - 0.5
        note = "" if resolved else unresolved_note(need, required, freed)
        return dir_plan(need, freed, after, resolved, note, suggestions(ledger.view, d, resolved)), moves, skipped


def assign(ledger: Ledger, chosen: list[Replica], need: Need, required: float, pool: int) -> list[Move] | Replica:
    """Each chosen replica, largest first, to its best target; the ledger takes them all, or none and the replica
    that found no target is returned."""
    duration = sum(r.size for r in chosen) / ledger.rate
    loads = {k: Load(v.bytes, v.growth, v.duration) for k, v in ledger.loads.items()}
    assignments = dict(ledger.assignments)
    moves = []
    trial = Ledger(ledger.view, ledger.limits, ledger.margin, ledger.rate, ledger.sources, loads, assignments)
    for r in sorted(chosen, key=lambda r: (-r.size, r.topic, r.partition)):
        found = targets(trial, r, duration)
        if not found:
            return r
        room, t = found[0]
        before = assignments.get(r.tp, (r.broker,))
        after = tuple(t.broker if b == r.broker else b for b in before)
        load = loads.setdefault(t.key, Load())
        load.bytes, load.growth, load.duration = load.bytes + r.size, load.growth + r.growth, max(load.duration, duration)
        assignments[r.tp] = after
        moves.append(Move(r.topic, r.partition, r.size, r.growth, (r.broker, r.path), t.key, before, after,
                          duration, why_move(ledger, r, t, room, need, required, len(chosen), pool)))
    ledger.loads, ledger.assignments = loads, assignments
    ledger.taken.update(r.tp for r in chosen)
    return moves


def why_move(ledger: Ledger, r: Replica, t: Dir, room: float, need: Need, required: float, chosen: int,
             pool: int) -> str:
    """The table's "why this one": what it frees toward what, and why that target."""
    share = (f"{chosen} of {pool} movable replicas, the fewest bytes that free {human(required)}"
             if not math.isinf(required) else f"{chosen} of {pool} movable replicas (not enough to free what it needs)")
    if t.broker == r.broker:
        where = f"{t.path} on the same broker has room ({human(room)} above its limit after)"
    else:
        where = (f"no other dir of broker {r.broker} has room; broker {t.broker}"
                 f"{' (rack ' + str(ledger.view.racks.get(t.broker)) + ')' if ledger.view.racks.get(t.broker) else ''}"
                 f" holds no replica of it and {t.path} keeps {human(room)} above its limit")
    return f"{share}; {where}"


def no_room(r: Replica) -> Skipped:
    return Skipped(r.topic, r.partition, r.broker, r.path,
                   "no dir can take it without going past its own limit (or onto a broker or rack its other replicas use)")


def dir_plan(need: Need, freed: int, after: float, resolved: bool, note: str, tips: tuple[str, ...]) -> DirPlan:
    d = need.dir
    return DirPlan(d.broker, d.path, need.why, d.available, d.total, need.limit_bytes, need.goal, freed,
                   None if d.offline else after, resolved, note, tips)


def unresolved_note(need: Need, required: float, freed: int) -> str:
    if math.isinf(required):
        return (f"it fills at {human(need.dir.growth)}/s, at least the throttle rate: no move can outpace it; "
                "raise --throttle or slow the producers")
    return (f"the replicas that can move free {human(freed)} of the {human(required)} it needs: the other dirs "
            "lack the room")


def suggestions(view: ClusterView, d: Dir, resolved: bool) -> tuple[str, ...]:
    """What an operator may do that remedy never does itself: it deletes no data and lowers no retention."""
    if resolved:
        return ()
    sizes: dict[str, int] = {}
    for r in view.replicas:
        if (r.broker, r.path) == d.key and not r.future:
            sizes[r.topic] = sizes.get(r.topic, 0) + r.size
    top = sorted(sizes.items(), key=lambda x: (-x[1], x[0]))[:3]
    out = [f"lower retention.ms or retention.bytes of topic {t} ({human(n)} on this dir), or delete its old records "
           "(kafka-delete-records.sh): suggested only, remedy never deletes data" for t, n in top]
    return tuple(out + ["add a log dir or a broker with room, then run remedy again"])
