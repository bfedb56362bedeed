"""The enforcer's durable record: the operator's quotas (baseline) and what it wrote, in a JSON file replaced atomically."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from quota_pipeline.core import names, signing
from quota_pipeline.core.config import CHECKPOINT_PATH
from quota_pipeline.core.display import visible
from quota_pipeline.core.signing import SigningKey
from quota_pipeline.kafka.client_quotas import Quotas, quotas_from_json, quotas_to_json
from quota_pipeline.reader.admission import signature_refusal

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


SIGNATURE = "signature"


class StateFile:
    """A JSON state file confined to its root, written with temp file + fsync + rename (+ fsync of the directory), so a
    crash leaves the old record or the new one, never a torn one. Subclasses name it and say what to do when it
    cannot be read (`BROKEN`) and what a failed write left unchanged (`NOT_WRITTEN`).

    With signing keys (quota.pipeline.signing.keys) the file carries a `signature` field: an HMAC-SHA-256 with the
    first key over the file's kind and name and its canonical JSON, so that whoever can write the directory but holds
    no key cannot make the command act on a file of theirs, nor pass one cluster's or one command's file off as
    another's. A file without a valid signature is refused with one line and nothing is sent."""

    WHAT = "state file"
    BROKEN = ""
    NOT_WRITTEN = ""

    def __init__(self, path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None,
                 keys: tuple[SigningKey, ...] = ()):
        self.path = Path(path)
        self.root = Path(root) if root is not None else self.path.parent  # nothing is written outside it
        self.keys = keys

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
            raw = json.loads(text)
        except ValueError as exc:
            raise BaselineError(f"the {self.WHAT} {visible(self.path)} is not valid ({exc}); {self.BROKEN}") from None
        if self.keys:
            self._verify(raw)
        if isinstance(raw, dict):
            raw.pop(SIGNATURE, None)
        try:
            return parse(raw)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BaselineError(f"the {self.WHAT} {visible(self.path)} is not valid ({visible(str(exc))}); "
                                f"{self.BROKEN}") from None

    def _signed_bytes(self, body: dict[str, Any]) -> tuple[bytes, bytes]:
        """(what names the file, its canonical JSON): the two parts the signature covers."""
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return f"{self.WHAT}:{self.path.name}".encode("utf-8"), canonical.encode("ascii")

    def _verify(self, raw: Any) -> None:
        header = raw.get(SIGNATURE) if isinstance(raw, dict) else None
        if isinstance(header, str):
            name, value = self._signed_bytes({k: v for k, v in raw.items() if k != SIGNATURE})
            if signature_refusal(self.keys, name, value, header.encode("utf-8")) is None:
                return
        why = "is not signed" if header is None else "has a signature that none of the keys makes"
        raise BaselineError(f"the {self.WHAT} {visible(self.path)} {why} (quota.pipeline.signing.keys): this "
                            f"pipeline did not write it, so nothing was done; check it and delete it")

    def _save(self, raw: dict[str, Any]) -> None:
        if self.keys:
            name, value = self._signed_bytes(raw)
            raw = {**raw, SIGNATURE: signing.sign(self.keys[0], name, value).decode("ascii")}
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


def baseline_file(explicit: str | None, checkpoint_path: str, cluster: str,
                  keys: tuple[SigningKey, ...] = ()) -> BaselineFile:
    """--baseline PATH (confined to its directory), else <checkpoint>/enforce/<cluster>.json with the cluster name
    checked (names.UnsafePath) and the file confined to <checkpoint>/enforce; signed with `keys` when there are any."""
    if explicit:
        return BaselineFile(explicit, keys=keys)
    if "://" in checkpoint_path:  # the job's checkpoint on an object store: enforce keeps its baseline locally
        raise names.UnsafePath(f"{CHECKPOINT_PATH} is {checkpoint_path}, not a local directory, so it cannot hold "
                               f"enforce's baseline file; pass --baseline PATH")
    names.checked(cluster, "the cluster to enforce (--cluster, quota.pipeline.cluster.name or the cluster id) "
                           "names the baseline file")
    root = Path(checkpoint_path) / "enforce"
    return BaselineFile(root / f"{cluster}.json", root, keys)


DEFAULT_STATE_ROOT = "/var/lib/quota-pipeline"  # enforce's checkpoint root when CONFIG sets none
ABSOLUTE_STATE_ENV = "QUOTA_PIPELINE_ABSOLUTE_STATE"  # set (the job's image sets it): a relative state path is refused


def state_checkpoint(checkpoint_path: str, set_in_config: bool) -> str:
    """Where enforce keeps its state files: quota.pipeline.checkpoint.path when CONFIG sets it, else
    /var/lib/quota-pipeline, never the job's relative default (./checkpoints): a container loses its working directory,
    and with the files the only record of the quotas and bindings to undo."""
    return checkpoint_path if set_in_config else DEFAULT_STATE_ROOT


def check_durable(explicit: str | None, checkpoint_path: str, absolute_required: bool, create: bool) -> None:
    """Raises BaselineError, before anything is sent, when the state path (--baseline, else the checkpoint) is relative
    where an absolute one is required (the job's image), or (`create`) its directory cannot be created and written:
    otherwise the first stop would find out, or a restart in a new container would forget what to undo."""
    given = explicit or checkpoint_path
    if not explicit and "://" in checkpoint_path:
        return  # not a local directory: baseline_file says so
    if absolute_required and not Path(given).is_absolute():
        raise BaselineError(f"enforce's state path {visible(given)} is relative (to a working directory this image "
                            f"does not keep; {ABSOLUTE_STATE_ENV} is set): set {CHECKPOINT_PATH} to an absolute "
                            f"directory on a persistent volume, or pass --baseline /ABSOLUTE/PATH")
    if not create:
        return
    directory = Path(explicit).parent if explicit else Path(checkpoint_path) / "enforce"
    why = "not writable"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK | os.X_OK)
    except OSError as exc:
        writable, why = False, str(exc.strerror or exc)
    if not writable:
        raise BaselineError(f"enforce keeps its baseline and refusal state files in {visible(directory)}, which "
                            f"cannot be used ({why}): set {CHECKPOINT_PATH} to a durable directory this user can "
                            f"write, or pass --baseline PATH; nothing was changed on the cluster")


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
