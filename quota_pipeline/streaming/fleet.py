"""The fleet as the checkpoint last saw it: which configured clusters are new and which were removed since."""
from __future__ import annotations

import json
from dataclasses import dataclass

from quota_pipeline.streaming import checkpoint_files


@dataclass(frozen=True)
class FleetChange:
    added: tuple[str, ...]
    removed: tuple[str, ...]


def last_offsets(query_checkpoint: str) -> dict[str, int] | None:
    """The source's offsets (config name -> tick) of the last planned micro-batch; None without a checkpoint.

    Spark writes `<checkpoint>/offsets/<batch id>`: a version line, the batch metadata, then one line per source.
    """
    offsets = checkpoint_files.join(query_checkpoint, "offsets")
    batches = sorted(int(name) for name in checkpoint_files.names(offsets) if name.isdigit())
    if not batches:
        return None
    lines = (checkpoint_files.read_text(offsets, str(batches[-1])) or "").splitlines()
    try:
        value = json.loads(lines[2])
    except (IndexError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def fleet_change(query_checkpoint: str, configured: list[str]) -> FleetChange | None:
    previous = last_offsets(query_checkpoint)
    if previous is None:
        return None
    return FleetChange(tuple(sorted(set(configured) - set(previous))), tuple(sorted(set(previous) - set(configured))))
