"""A plan for people (rich tables: what moves, from where, to where, bytes, why this one) and for machines (JSON)."""
from __future__ import annotations

import json

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from quota_pipeline.core.display import visible
from quota_pipeline.remedy.plan import MovePlan, human

_WHY = {"soft": "at or past its soft limit", "hard": "at or past its hard limit",
        "predictive": "reaches its hard limit within the horizon", "offline": "offline"}


def as_json(plan: MovePlan) -> str:
    return json.dumps(plan.to_json(), indent=2, sort_keys=False)


def dirs_table(plan: MovePlan) -> Table:
    t = Table(title="log dirs that need the plan", box=box.SIMPLE_HEAD, title_justify="left")
    for col, justify in (("broker", "right"), ("log dir", "left"), ("why", "left"), ("available", "right"),
                         ("limit", "right"), ("goal", "right"), ("moves free", "right"), ("after", "right"),
                         ("outcome", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for d in plan.dirs:
        outcome = Text("back above its limit", "green") if d.resolved else Text(d.note, "red")
        t.add_row(str(d.broker), visible(d.log_dir), _WHY.get(d.why, d.why), human(d.available),
                  human(d.limit_bytes), human(d.goal), human(d.freed), human(d.after), outcome)
    return t


def moves_table(plan: MovePlan) -> Table:
    t = Table(title=f"moves ({human(plan.moved_bytes)} in all, throttled at {human(plan.rate)}/s)",
              box=box.SIMPLE_HEAD, title_justify="left")
    for col, justify in (("what moves", "left"), ("from", "left"), ("to", "left"), ("bytes", "right"),
                         ("why this one", "left")):
        t.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for m in plan.moves:
        t.add_row(visible(f"{m.topic}-{m.partition}"), visible(f"broker {m.source[0]} {m.source[1]}"),
                  visible(f"broker {m.target[0]} {m.target[1]}") + ("" if m.kind == "intra-broker" else
                                                                     f" (replicas {_ids(m.replicas_after)})"),
                  human(m.size), visible(m.why))
    return t


def as_tables(plan: MovePlan) -> RenderableType:
    if not plan.dirs:
        return Text(f"{visible(plan.cluster)}: every log dir is above its limit; nothing to move")
    parts: list[RenderableType] = [dirs_table(plan)]
    parts.append(moves_table(plan) if plan.moves else Text("no move can help (see the outcome above)"))
    if plan.cordon:
        parts.append(Text("each source dir is cordoned while the plan runs (cordoned.log.dirs, KIP-1066)"))
    tips = [s for d in plan.dirs for s in d.suggestions]
    if tips:
        parts.append(Text("suggested, never done by remedy:\n" + "\n".join(f"  - {visible(s)}" for s in tips)))
    if plan.skipped:
        parts.append(Text(f"left where they are: {len(plan.skipped)} replica(s) (--json lists each with why)"))
    return Group(*parts)


def print_plan(plan: MovePlan, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # piped or logged: no terminal width to fit, and the why column is long
            console = Console(width=200)
    console.print(as_tables(plan))


def _ids(brokers: tuple[int, ...]) -> str:
    return ",".join(map(str, brokers))
