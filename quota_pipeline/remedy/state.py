"""The plan being executed and the configs it set, in a JSON state file written before anything changes: Kafka's
configs carry no tag, so a value equal to ours may be an operator's; only this file tells which are remedy's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quota_pipeline.core import names
from quota_pipeline.core.config import CHECKPOINT_PATH
from quota_pipeline.core.display import visible
from quota_pipeline.core.signing import SigningKey
from quota_pipeline.enforce.baseline import BaselineError, StateFile
from quota_pipeline.remedy.plan import Forbidden, MovePlan, field_of
from quota_pipeline.remedy.throttles import Setting

FORMAT_VERSION = 1


@dataclass(frozen=True)
class RemedyState:
    """Exists from before the first change of a plan's execution until its last config is taken back."""

    plan: MovePlan
    ours: tuple[Setting, ...]  # what remedy set (or is about to): only these are ever taken back
    started_at: float  # unix time

    def to_json(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "started_at": self.started_at, "plan": self.plan.to_json(),
                "ours": [s.to_json() for s in self.ours]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "RemedyState":
        if field_of(raw, "format_version", int, optional=True) != FORMAT_VERSION:
            raise ValueError(f"unknown format_version {raw.get('format_version')!r}")
        return cls(MovePlan.from_json(field_of(raw, "plan", dict)),
                   tuple(Setting.from_json(s) for s in field_of(raw, "ours", list)),
                   float(field_of(raw, "started_at", float)))


class RemedyFile(StateFile):
    WHAT = "remedy state file"
    BROKEN = ("it names the throttles and cordons remedy set: repair it, or remove those configs by hand "
              "(kafka-configs.sh --alter --delete-config) and delete the file")
    NOT_WRITTEN = "nothing was changed on the cluster"

    def load(self) -> RemedyState | None:
        try:
            return self._load(RemedyState.from_json)
        except Forbidden as exc:
            raise self.refused(exc) from None

    def refused(self, why: Forbidden) -> BaselineError:
        """The one line for a state that asks for what remedy never does: nothing is sent."""
        return BaselineError(f"the {self.WHAT} {visible(self.path)} {why}: nothing was sent; check the file and "
                             "delete it")

    def save(self, state: RemedyState) -> None:
        self._save(state.to_json())


def remedy_file(explicit: str | None, checkpoint_path: str, cluster: str,
                keys: tuple[SigningKey, ...] = ()) -> RemedyFile:
    """--state PATH, else <checkpoint>/remedy/<cluster>.json (the cluster name checked, the file kept inside); signed
    with `keys` when there are any."""
    if explicit:
        return RemedyFile(explicit, keys=keys)
    if "://" in checkpoint_path:
        raise names.UnsafePath(f"{CHECKPOINT_PATH} is {checkpoint_path}, not a local directory, so it cannot hold "
                               "remedy's state file; pass --state PATH")
    names.checked(cluster, "the cluster (quota.pipeline.cluster.name or the cluster id) names remedy's state file")
    root = Path(checkpoint_path) / "remedy"
    return RemedyFile(root / f"{cluster}.json", root, keys)
