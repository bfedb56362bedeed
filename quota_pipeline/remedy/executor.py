"""`remedy --execute`: apply a plan, follow it until its moves are done, take back exactly the configs it set. Every
step reads the cluster first, so a run that was interrupted (or crashed) is resumed by running it again."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from quota_pipeline.core.config import Config
from quota_pipeline.remedy import throttles, vet
from quota_pipeline.remedy.gather import ReadPort, read_view
from quota_pipeline.remedy.inputs import ClusterView
from quota_pipeline.remedy.plan import CROSS, INTRA, Forbidden, Move, MovePlan, human
from quota_pipeline.remedy.progress import DONE, PENDING, RUNNING, copied, finished, state_of, summary
from quota_pipeline.remedy.state import RemedyFile, RemedyState

# AlterReplicaLogDirs sent to the broker a reassignment will add: it only records the dir for the replica to come.
PREFERRED_DIR_RECORDED = ("ReplicaNotAvailableError", "NotLeaderForPartitionError", "NotLeaderOrFollowerError")


class Port(ReadPort, Protocol):
    def move_within(self, moves: dict[tuple[str, int, int], str]) -> dict[tuple[str, int, int], str | None]: ...
    def reassign(self, replicas: dict[tuple[str, int], tuple[int, ...] | None]) -> dict[tuple[str, int], str | None]: ...
    def alter(self, changes: list[tuple[str, str, str, str, str | None]]) -> None: ...


@dataclass
class Executor:
    admin: Port
    conf: Config
    store: RemedyFile
    say: Callable[[str], None] = print
    interval: float = 2.0
    sleep: Callable[[float], Any] = time.sleep
    clock: Callable[[], float] = time.time
    stop: threading.Event = field(default_factory=threading.Event)

    def view(self) -> ClusterView:
        return read_view(self.admin, self.conf)

    def current(self, settings: list[throttles.Setting]) -> throttles.Current:
        if not settings:
            return {}
        res, keys = throttles.resources(settings)
        return self.admin.configs(res, keys)

    def vetted(self, state: RemedyState, view: ClusterView) -> None:
        """Before any request: the state asks only for what a plan can (vet.check), or the one line naming its file."""
        try:
            vet.check(state, view)
        except Forbidden as exc:
            raise self.store.refused(exc) from None

    def begin(self, plan: MovePlan) -> RemedyState:
        """Write-ahead: what it will set goes to the state file before the cluster changes."""
        want = throttles.wanted(plan)
        state = RemedyState(plan, tuple(throttles.ours_to_set(want, self.current(want))), self.clock())
        self.store.save(state)
        return state

    def apply(self, state: RemedyState, view: ClusterView) -> None:
        """Its configs where not in place yet, then every move still pending (each call repeats safely)."""
        self.vetted(state, view)
        ours = list(state.ours)
        changes = throttles.to_apply(ours, self.current(ours))
        if changes:
            self.admin.alter(changes)
            for change in changes:
                self.say(f"set {change[0]} {change[1]}: {change[2]} {change[3]} {change[4]}")
        pending = [m for m in state.plan.moves if state_of(m, view) == PENDING]
        self.issue([m for m in pending if m.kind == INTRA], [m for m in pending if m.kind == CROSS])

    def issue(self, intra: list[Move], cross: list[Move]) -> None:
        within = {(m.topic, m.partition, m.source[0]): m.target[1] for m in intra}
        # The target broker records the dir for the replica the reassignment creates there.
        within.update({(m.topic, m.partition, m.target[0]): m.target[1] for m in cross})
        if within:
            for (t, p, b), error in self.admin.move_within(within).items():
                if error and not ((t, p) in {(m.topic, m.partition) for m in cross} and error in PREFERRED_DIR_RECORDED):
                    self.say(f"AlterReplicaLogDirs {t}-{p} on broker {b}: {error}")
        if cross:
            for (t, p), error in self.admin.reassign({(m.topic, m.partition): m.replicas_after for m in cross}).items():
                if error:
                    self.say(f"AlterPartitionReassignments {t}-{p}: {error}")
        for m in intra + cross:
            self.say(f"started {m.topic}-{m.partition}: broker {m.source[0]} {m.source[1]} -> broker {m.target[0]} "
                     f"{m.target[1]} ({human(m.size)})")

    def follow(self, state: RemedyState) -> dict[Move, str]:
        """Until every move is done (or taken over by someone else): a progress line whenever it changed."""
        last = ""
        while True:
            view = self.view()
            states = {m: state_of(m, view) for m in state.plan.moves}
            line = self.progress_line(states, view)
            if line != last:
                self.say(line)
                last = line
            if finished(states) or self.stop.is_set():
                return states
            self.sleep(self.interval)

    def progress_line(self, states: dict[Move, str], view: ClusterView) -> str:
        total = sum(m.size for m in states) or 1
        done = sum(m.size if s == DONE else copied(m, view) if s == RUNNING else 0 for m, s in states.items())
        counts = ", ".join(f"{n} {s}" for s, n in summary(states).items() if n)
        return f"moves: {counts}; {human(done)} of {human(total)} copied ({100 * min(done, total) / total:.0f} %)"

    def finish(self, state: RemedyState) -> None:
        """Take back its configs (only those still as it set them), then forget the plan."""
        ours = list(state.ours)
        changes = throttles.to_remove(ours, self.current(ours))
        if changes:
            self.admin.alter(changes)
            for change in changes:
                self.say(f"removed {change[0]} {change[1]}: {change[2]} {change[3]} {change[4] or ''}".rstrip())
        self.store.delete()

    def abort(self, state: RemedyState) -> None:
        """Cancel its moves still running (a reassignment is cancelled, a future replica sent back to its dir), then
        take back its configs."""
        view = self.view()
        self.vetted(state, view)
        running = [m for m in state.plan.moves if state_of(m, view) in (RUNNING, PENDING)]
        cross = {(m.topic, m.partition): None for m in running if m.kind == CROSS and state_of(m, view) == RUNNING}
        if cross:
            self.admin.reassign(cross)
        back = {(m.topic, m.partition, m.source[0]): m.source[1] for m in running
                if m.kind == INTRA and state_of(m, view) == RUNNING}
        if back:
            self.admin.move_within(back)
        for m in running:
            self.say(f"cancelled {m.topic}-{m.partition}")
        self.finish(state)

    def execute(self, state: RemedyState, note: str = "") -> dict[Move, str]:
        """Apply, follow, and (when every move is done) clean up; an interrupted run leaves the state file. `note`
        is said once the state is found sound, before the first change."""
        view = self.view()
        self.vetted(state, view)
        if note:
            self.say(note)
        self.apply(state, view)
        states = self.follow(state)
        if finished(states):
            self.finish(state)
            self.report_dirs(state.plan, self.view())
        return states

    def report_dirs(self, plan: MovePlan, view: ClusterView) -> None:
        """Each dir the plan was for, as it is now: Kafka deletes a moved replica's old copy only
        file.delete.delay.ms (60 s by default) after the move, so the space may come back a little later."""
        for d in plan.dirs:
            now = view.dir(d.broker, d.log_dir)
            if now is None or now.offline:
                continue
            late = "" if now.available >= d.goal else (" (the old copies go file.delete.delay.ms after each move, "
                                                       "60 s by default)")
            self.say(f"broker {d.broker} {d.log_dir}: {human(now.available)} available, goal {human(d.goal)}{late}")


def outcome(states: dict[Move, str]) -> str:
    done = sum(1 for s in states.values() if s == DONE)
    return f"{done} of {len(states)} move(s) done" + ("" if done == len(states) else
                                                       f"; {len(states) - done} taken over by someone else")
