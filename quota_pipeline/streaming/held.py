"""The factor each cluster's last published decision set, kept in the query's checkpoint so that a restart says
what it resumes at."""
from __future__ import annotations

import json
import math

from quota_pipeline.core.display import visible
from quota_pipeline.streaming import checkpoint_files

NAME = "factors.json"
Held = dict[str, tuple[float, str]]  # output key -> (throttle factor, decision source)
SHOWN = 10  # clusters named on the resume line; the rest are counted


def read(query_checkpoint: str) -> Held | None:
    """What `write` left (None: nothing, or a file this job did not write: it only feeds a log line)."""
    try:
        raw = json.loads(checkpoint_files.read_text(query_checkpoint, NAME) or "null")
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    held: Held = {}
    for key, value in raw.items():
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], (int, float))
                and not isinstance(value[0], bool) and math.isfinite(value[0]) and 0 <= value[0] <= 1
                and isinstance(value[1], str)):
            return None
        held[key] = (float(value[0]), value[1])
    return held


def write(query_checkpoint: str, held: Held) -> None:
    """Replace the file whole (a local rename, one object put on s3a)."""
    checkpoint_files.write_whole(query_checkpoint, NAME,
                                 json.dumps({k: [f, s] for k, (f, s) in sorted(held.items())}).encode())


def meaning(factor: float) -> str:
    return "stop in force" if factor == 0 else ("no throttle" if factor >= 1 else "throttled")


def resumed_line(held: Held | None) -> str:
    """'resumed from the checkpoint: c1 at factor 0.000 (stop in force), ...' (at most SHOWN clusters named)."""
    if held is None:
        return "resumed from the checkpoint (it does not record the factors in force)"
    if not held:
        return "resumed from the checkpoint: no decision published yet"
    items = sorted(held.items())
    named = ", ".join(f"{visible(k)} at factor {f:.3f} ({meaning(f)})" for k, (f, _) in items[:SHOWN])
    rest = items[SHOWN:]
    if rest:
        stopped = sum(1 for _, (f, _) in rest if f == 0)
        named += f" and {len(rest)} more ({stopped} with a stop in force)"
    return f"resumed from the checkpoint: {named}"
