"""What a plan (or the state of one being executed) may ask of the cluster as it is now: only what the planner can make.
Checked before every request of --execute, its resume and --abort; anything else is refused and nothing is sent."""
from __future__ import annotations

import math

from quota_pipeline.remedy import throttles
from quota_pipeline.remedy.inputs import ClusterView
from quota_pipeline.remedy.plan import INTRA, Forbidden, Move, MovePlan
from quota_pipeline.remedy.state import RemedyState


def check(state: RemedyState, view: ClusterView) -> None:
    """Forbidden unless every move is one replica of an existing partition between existing dirs of active brokers,
    its replication factor kept, and every config it set (or is to set) is a throttle or cordon its plan needs."""
    check_plan(state.plan, view)
    needed = {(s.resource, s.key): s for s in throttles.wanted(state.plan)}
    for s in state.ours:  # a Setting is a throttle or a cordon of the form remedy writes (throttles.Setting)
        want = needed.get((s.resource, s.key))
        if want is None or s.value != want.value or not set(s.entries) <= set(want.entries):
            raise Forbidden(f"asks for {s}, which its plan's moves do not need")


def check_plan(plan: MovePlan, view: ClusterView) -> None:
    if plan.cluster != view.cluster:
        raise Forbidden(f"holds a plan for cluster {plan.cluster}, not for {view.cluster}")
    if not (math.isfinite(plan.rate) and plan.rate >= 1):
        raise Forbidden(f"asks for a throttle of {plan.rate} bytes/s, which is no rate remedy sets (1 or more)")
    seen: set[tuple[str, int]] = set()
    for m in plan.moves:
        if (m.topic, m.partition) in seen:
            raise Forbidden(f"asks to move {m.topic}-{m.partition} twice")
        seen.add((m.topic, m.partition))
        check_move(m, view)


def check_move(m: Move, view: ClusterView) -> None:
    name, before, after = f"{m.topic}-{m.partition}", list(m.replicas_before), list(m.replicas_after)
    (source, source_dir), (target, target_dir) = m.source, m.target
    current = view.assignments.get((m.topic, m.partition))
    if current is None:
        raise Forbidden(f"asks to move {name}, which is not a partition of the cluster")
    if m.topic in view.protected:
        raise Forbidden(f"asks to move {name}, whose topic remedy never moves")
    if len(set(before)) != len(before) or len(set(after)) != len(after):
        raise Forbidden(f"asks to move {name} from replicas {before} to {after}, which lists a broker twice")
    # A reassignment in progress lists the replicas it adds with the others: then the factor is at most that many.
    moving = (m.topic, m.partition) in view.reassigning
    if len(after) != len(before) or (len(after) > len(current) if moving else len(after) != len(current)):
        raise Forbidden(f"asks to move {name} from replicas {before} to {after}, which changes its replication "
                        f"factor ({len(current)} now)")
    if source not in before or after != [target if b == source else b for b in before]:
        raise Forbidden(f"asks to move {name} from replicas {before} to {after}, which is not the one replica of "
                        f"broker {source} going to broker {target}")
    for b in (*after, target):
        if b not in view.racks:
            raise Forbidden(f"asks to move {name} to broker {b}, which is not an active broker of the cluster")
    dirs = [(target, target_dir)] + ([(source, source_dir)] if m.kind == INTRA else [])
    for broker, path in dirs:
        if view.dir(broker, path) is None:
            raise Forbidden(f"asks to move {name} between log dirs of broker {broker} with {path}, which is not one "
                            "of its log dirs")
    if m.kind == INTRA and source_dir == target_dir:
        raise Forbidden(f"asks to move {name} from {source_dir} of broker {source} to the same dir")
