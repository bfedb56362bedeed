"""The few checkpoint files the driver reads before Spark starts (commits, offsets, the stateful operator's metadata),
on a local disk or on s3a://."""
from __future__ import annotations

import json
import os

from quota_pipeline.streaming.s3a import is_s3a, object_uri


def is_local(path: str) -> bool:
    """Whether the checkpoint is on this host's file system (a plain path or file:), not an object store or HDFS."""
    return "://" not in path or path.startswith("file:")


def local(path: str) -> str:
    """A local checkpoint's path on this host's file system (file:/x is /x)."""
    return path.removeprefix("file:")


def join(directory: str, *names: str) -> str:
    """A path under the checkpoint: os.path.join would be right for a URI too, but says what it means here."""
    return "/".join([directory.rstrip("/"), *names]) if is_s3a(directory) else os.path.join(directory, *names)


def names(directory: str) -> list[str]:
    """The names directly under `directory` (none when it does not exist)."""
    if is_s3a(directory):
        from quota_pipeline.journal.objstore import store_for

        return sorted({o.rel.split("/", 1)[0] for o in store_for(object_uri(directory)).list("")})
    directory = local(directory)
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def read_text(directory: str, name: str, limit: int | None = None) -> str | None:
    """The file's text (its first `limit` bytes when given), or None when there is none."""
    if is_s3a(directory):
        from quota_pipeline.journal.objstore import store_for

        got = store_for(object_uri(directory)).get(name, None if limit is None else (0, limit - 1))
        return None if got is None else got.data.decode("utf-8", errors="replace")
    try:
        with open(os.path.join(local(directory), name), "rb") as f:
            return f.read(-1 if limit is None else limit).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None


def write_whole(directory: str, name: str, data: bytes) -> None:
    """Replace the file whole, so that a reader never sees part of it: a local rename, one object put on s3a."""
    if is_s3a(directory):
        from quota_pipeline.journal.objstore import store_for

        store_for(object_uri(directory)).put(name, data)
        return
    directory = local(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    part = f"{path}.{os.getpid()}.part"
    with open(part, "wb") as f:
        f.write(data)
    os.replace(part, path)


QUERY_DIR = "query"  # the streaming query's own checkpoint (offsets, commits, state) under the configured path


def query_dir(checkpoint_path: str) -> str:
    return join(checkpoint_path, QUERY_DIR)


def last_planned(query_checkpoint: str) -> dict | None:
    """The source's end offsets (config name -> tick) of the last micro-batch Spark planned, from its offsets log;
    None without one.

    Spark writes `<checkpoint>/offsets/<batch id>` before it runs the batch: a version line, the batch metadata,
    then one line per source (the job has one). Read before the query plans anything, this is the one batch
    Spark may run again from the log (when `commits/<batch id>` is missing): a re-run, not a new batch.
    """
    offsets = join(query_checkpoint, "offsets")
    batches = sorted(int(name) for name in names(offsets) if name.isdigit())
    if not batches:
        return None
    lines = (read_text(offsets, str(batches[-1])) or "").splitlines()
    try:
        value = json.loads(lines[2])
    except (IndexError, ValueError):
        return None
    return value if isinstance(value, dict) else None


# The operator an earlier form of the stateful step recorded (frames in and out): a checkpoint of it is refused.
PANDAS_FORM = "transformWithStateInPandasExec"


def stateful_operator(query_checkpoint: str) -> str | None:
    """The name Spark recorded for the query's stateful operator, None before a micro-batch recorded one.

    Spark writes `<checkpoint>/state/0/_metadata/v2/<batch id>` when the operator first runs (and again when its
    state's schema changes): a version line, then JSON whose operatorInfo names the operator. A restarted query
    must use the operator that wrote its state.
    """
    directory = join(query_checkpoint, "state", "0", "_metadata", "v2")
    versions = sorted(int(name) for name in names(directory) if name.isdigit())
    if not versions:
        return None
    lines = (read_text(directory, str(versions[-1])) or "").splitlines()
    try:
        name = json.loads(lines[1])["operatorInfo"]["operatorName"]
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None
