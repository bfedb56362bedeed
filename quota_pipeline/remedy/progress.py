"""Where each move of a plan is, read from what the cluster reports (replica dirs, future replicas, reassignments):
a re-run knows what is left from the cluster itself."""
from __future__ import annotations

from quota_pipeline.remedy.inputs import ClusterView
from quota_pipeline.remedy.plan import INTRA, Move

PENDING, RUNNING, DONE, CHANGED = "pending", "running", "done", "changed"


def state_of(move: Move, view: ClusterView) -> str:
    """PENDING (not started), RUNNING, DONE, or CHANGED (the replica is somewhere the plan did not put it: someone
    else moved it, and remedy leaves it)."""
    tp, broker = (move.topic, move.partition), move.source[0]
    if move.kind == INTRA:
        current = {r.path for r in view.replicas if r.tp == tp and r.broker == broker and not r.future}
        future = {r.path for r in view.replicas if r.tp == tp and r.broker == broker and r.future}
        if future:
            return RUNNING if future == {move.target[1]} and current == {move.source[1]} else CHANGED
        return DONE if current == {move.target[1]} else PENDING if current == {move.source[1]} else CHANGED
    if tp in view.reassigning:
        return RUNNING
    replicas = view.assignments.get(tp)
    if replicas is not None and set(replicas) == set(move.replicas_after):
        return DONE
    return PENDING if replicas is not None and set(replicas) == set(move.replicas_before) else CHANGED


def copied(move: Move, view: ClusterView) -> int:
    """Bytes already at the target: the future replica (same broker), or the new replica (another broker)."""
    tp = (move.topic, move.partition)
    return max((r.size for r in view.replicas if r.tp == tp and r.broker == move.target[0]
                and (r.future or move.kind != INTRA) and (move.kind != INTRA or r.path == move.target[1])), default=0)


def summary(states: dict[Move, str]) -> dict[str, int]:
    out = {s: 0 for s in (PENDING, RUNNING, DONE, CHANGED)}
    for s in states.values():
        out[s] += 1
    return out


def finished(states: dict[Move, str]) -> bool:
    """Nothing left for the plan to wait for: every move done or taken over by someone else."""
    return all(s in (DONE, CHANGED) for s in states.values())
