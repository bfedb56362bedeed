"""The enforcer's durable record: the operator's quotas (baseline) and what it wrote, in a JSON file replaced atomically."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from quota_pipeline.core import names
from quota_pipeline.core.config import CHECKPOINT_PATH
from quota_pipeline.core.display import visible
from quota_pipeline.kafka.client_quotas import Quotas, quotas_from_json, quotas_to_json

FORMAT_VERSION = 1


@dataclass
class EnforcerState:
    """Exists from just before the first throttling change until the baseline is restored and confirmed."""

    cluster: str
    baseline: Quotas  # the quotas as the operator set them, unthrottled
    applied: Quotas  # the target last written
    factor: float  # the factor `applied` enforces
    recent: list[tuple[float, Quotas]] = field(default_factory=list)  # (unix time, state a write replaced)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "cluster": self.cluster,
            "factor": self.factor,
            "baseline": quotas_to_json(self.baseline),
            "applied": quotas_to_json(self.applied),
            "recent": [{"written_at": t, "replaced": quotas_to_json(q)} for t, q in self.recent],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "EnforcerState":
        if raw.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"unknown format_version {raw.get('format_version')!r}")
        return cls(
            cluster=str(raw["cluster"]),
            baseline=quotas_from_json(raw["baseline"]),
            applied=quotas_from_json(raw["applied"]),
            factor=float(raw["factor"]),
            recent=[(float(r["written_at"]), quotas_from_json(r["replaced"])) for r in raw.get("recent", [])],
        )


class BaselineError(RuntimeError):
    """The baseline file cannot be read or written; the message names the file and what to do."""


class StateFile:
    """A JSON state file confined to its root, written with temp file + fsync + rename (+ fsync of the directory), so a
    crash leaves the old record or the new one, never a torn one. Subclasses name it and say what to do when it
    cannot be read (`BROKEN`) and what a failed write left unchanged (`NOT_WRITTEN`)."""

    WHAT = "state file"
    BROKEN = ""
    NOT_WRITTEN = ""

    def __init__(self, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None):
        self.path = Path(path)
        self.root = Path(root) if root is not None else self.path.parent  # nothing is written outside it

    def _confined(self) -> None:
        try:
            names.inside(self.root, self.path)
        except names.UnsafePath as exc:
            raise BaselineError(f"the {self.WHAT} {visible(self.path)}: {exc}") from None

    def _load(self, parse: Callable[[Any], Any]) -> Any:
        """`parse` of the file's JSON, None when there is no file."""
        self._confined()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BaselineError(f"cannot read the {self.WHAT} {self.path}: {exc}") from None
        try:
            return parse(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise BaselineError(f"the {self.WHAT} {self.path} is not valid ({exc}); {self.BROKEN}") from None

    def _save(self, raw: dict[str, Any]) -> None:
        data = json.dumps(raw, indent=1, sort_keys=True).encode()
        self._confined()
        try:
            write_atomically(self.path, data)
        except OSError as exc:
            raise BaselineError(f"cannot write the {self.WHAT} {self.path}: {exc}; {self.NOT_WRITTEN}; make the "
                                "directory writable or pass --baseline PATH") from None

    def delete(self) -> None:
        self._confined()
        if self.path.exists():
            self.path.unlink(missing_ok=True)
            _fsync_dir(self.path.parent)


class BaselineFile(StateFile):
    """One JSON file per enforced cluster: the operator's quotas (baseline) and what the enforcer wrote."""

    WHAT = "baseline file"
    BROKEN = "it holds the quotas to restore: repair it, or restore the quotas by hand and delete it"
    NOT_WRITTEN = "nothing was changed on the cluster"

    def load(self) -> EnforcerState | None:
        return self._load(EnforcerState.from_json)

    def save(self, state: EnforcerState) -> None:
        self._save(state.to_json())


def baseline_file(explicit: str | None, checkpoint_path: str, cluster: str) -> BaselineFile:
    """--baseline PATH (confined to its directory), else <checkpoint>/enforce/<cluster>.json with the cluster name
    checked (names.UnsafePath) and the file confined to <checkpoint>/enforce."""
    if explicit:
        return BaselineFile(explicit)
    if "://" in checkpoint_path:  # the job's checkpoint on an object store: enforce keeps its baseline locally
        raise names.UnsafePath(f"{CHECKPOINT_PATH} is {checkpoint_path}, not a local directory, so it cannot hold "
                               f"enforce's baseline file; pass --baseline PATH")
    names.checked(cluster, "the cluster to enforce (--cluster, quota.pipeline.cluster.name or the cluster id) "
                           "names the baseline file")
    root = Path(checkpoint_path) / "enforce"
    return BaselineFile(root / f"{cluster}.json", root)


def write_atomically(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename, fsync of the directory: a crash leaves the old content or the new, never a torn
    file (raises OSError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)
