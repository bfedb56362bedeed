"""The fault campaign's schedule: a seeded random, overlapping list of faults, the same for the same seed."""
from __future__ import annotations

import random
from dataclasses import dataclass

# kind -> weight. Node faults (kill9, stop, pause, controller_restart) never overlap one another, so a 3-node
# quorum keeps its majority; fills, the job, the output broker and forged records overlap anything.
WEIGHTS = {"fill_hard": 3, "fill_enospc": 2, "kill9": 2, "stop": 2, "pause": 1, "pause_short": 2,
           "controller_restart": 1, "job_kill": 1, "output_stop": 1, "forge_malformed": 1, "forge_future": 1,
           "enforcer_kill": 1}
# Drawn only in the `enforce` variant (so the callback variant's seeds keep their schedules).
ENFORCE_KINDS = ("enforcer_kill",)
NODE_KINDS = ("kill9", "stop", "pause", "pause_short", "controller_restart")
FILL_KINDS = ("fill_hard", "fill_enospc")
NODE_RESTART_S = 25.0  # what a node restart takes on a busy 2-core machine, kept free of other node faults
JOB_RESTART_S = 90.0  # Spark's start-up under load: one job kill at a time


@dataclass(frozen=True)
class Planned:
    """A fault to inject `at` seconds after the campaign starts, held `hold` seconds (0: an instant fault)."""

    at: float
    kind: str
    target: str  # node<i>, job, output, topic; controller_restart resolves the leader when it runs
    hold: float

    def text(self) -> str:
        return f"+{self.at:6.1f} s  {self.kind:<18} {self.target:<8} hold {self.hold:.1f} s"

    @classmethod
    def parse(cls, text: str) -> "Planned":
        """KIND:TARGET@AT+HOLD, e.g. fill_enospc:node1@5+30 (for a fixed schedule)."""
        try:
            kind, rest = text.split(":", 1)
            target, times = rest.split("@", 1)
            at, hold = times.split("+", 1)
            planned = cls(float(at), kind, target, float(hold))
        except ValueError:
            raise ValueError(f"--fault {text!r}: expected KIND:TARGET@AT+HOLD, e.g. fill_enospc:node1@5+30") from None
        if kind not in WEIGHTS:
            raise ValueError(f"--fault {text!r}: unknown kind {kind!r}; one of {', '.join(WEIGHTS)}")
        return planned


def schedule(seed: int, seconds: float, nodes: int, interval: float, validity: float, output_on_observed: bool,
             warmup: float = 10.0, cooldown: float | None = None, exclude: tuple[str, ...] = (),
             enforce: bool = False) -> list[Planned]:
    """Faults from `warmup` until `cooldown` before the end, one every ~2 intervals (at least 4 s) on average;
    kinds in `exclude` are never drawn, nor the enforcer's without `enforce`."""
    rng = random.Random(seed)
    cooldown = 4 * interval + 10 if cooldown is None else cooldown
    kinds = [k for k in WEIGHTS if not (output_on_observed and k == "output_stop") and k not in exclude
             and (enforce or k not in ENFORCE_KINDS)]
    weights = [WEIGHTS[k] for k in kinds]
    node_free = 0.0  # node faults: when the last one (with its restart) is over
    fill_free = {n: 0.0 for n in range(1, nodes + 1)}
    fills: list[tuple[float, float, int]] = []
    job_free = output_free = enforcer_free = 0.0
    forge_free: dict[str, float] = {}
    out: list[Planned] = []
    t = warmup
    while True:
        t += rng.expovariate(1 / max(4.0, 2 * interval))
        if t >= seconds - cooldown:
            return out
        kind = rng.choices(kinds, weights)[0]
        if kind in FILL_KINDS:
            free = [n for n, until in fill_free.items() if until <= t]
            if not free:
                continue
            node = rng.choice(free)
            hold = rng.uniform(4, 8) * interval if kind == "fill_hard" else rng.uniform(5, 9) * interval
            fill_free[node] = t + hold + (NODE_RESTART_S if kind == "fill_enospc" else 0) + interval
            fills.append((t, t + hold, node))
            node_free = max(node_free, t + hold + NODE_RESTART_S) if kind == "fill_enospc" else node_free
            out.append(Planned(round(t, 1), kind, f"node{node}", round(hold, 1)))
        elif kind in NODE_KINDS:
            if t < node_free:
                continue
            full = [n for a, b, n in fills if a <= t < b]
            node = rng.choice(full) if full and rng.random() < 0.5 else rng.randint(1, nodes)  # a full one too
            hold = {"pause_short": rng.uniform(0.3, 0.4) * interval, "pause": rng.uniform(2, 4) * interval,
                    "controller_restart": 0.0}.get(kind, rng.uniform(2, 5) * interval)
            node_free = t + hold + (0 if kind.startswith("pause") else NODE_RESTART_S)
            out.append(Planned(round(t, 1), kind, "controller" if kind == "controller_restart" else f"node{node}",
                               round(hold, 1)))
        elif kind == "job_kill":
            if t < job_free:
                continue
            job_free = t + JOB_RESTART_S
            out.append(Planned(round(t, 1), kind, "job", 0.0))
        elif kind == "enforcer_kill":
            if t < enforcer_free:
                continue
            enforcer_free = t + 4 * interval
            out.append(Planned(round(t, 1), kind, "enforcer", 0.0))
        elif kind == "output_stop":
            if t < output_free:
                continue
            hold = validity + rng.uniform(2, 5)
            output_free = t + hold + NODE_RESTART_S
            out.append(Planned(round(t, 1), kind, "output", round(hold, 1)))
        else:
            if t < forge_free.get(kind, 0.0):
                continue
            forge_free[kind] = t + 30.0
            out.append(Planned(round(t, 1), kind, "topic", 0.0))


def describe(seed: int, planned: list[Planned]) -> str:
    return "\n".join([f"schedule of seed {seed} ({len(planned)} faults):"] + ["  " + p.text() for p in planned])
