"""The fleet as the checkpoint last saw it: which configured clusters are new and which were removed since."""
from __future__ import annotations

from dataclasses import dataclass

from quota_pipeline.streaming import checkpoint_files


@dataclass(frozen=True)
class FleetChange:
    added: tuple[str, ...]
    removed: tuple[str, ...]


def last_offsets(query_checkpoint: str) -> dict[str, int] | None:
    """The source's offsets (config name -> tick) of the last planned micro-batch; None without a checkpoint."""
    return checkpoint_files.last_planned(query_checkpoint)


def fleet_change(query_checkpoint: str, configured: list[str]) -> FleetChange | None:
    previous = last_offsets(query_checkpoint)
    if previous is None:
        return None
    return FleetChange(tuple(sorted(set(configured) - set(previous))), tuple(sorted(set(previous) - set(configured))))
