"""Where the journal keeps its files: one storage interface, a local directory or an s3:// prefix behind it.

Every guarantee of the journal (docs/design.md, "Journal lifetime") rests on what this interface promises, which
each implementation keeps its own way (journal/local_storage.py: link, rename, fsync, flock; journal/object_storage.py:
atomic and conditional PUTs, no rename):
- `write_new` is first writer wins: of any number of writers of one name, exactly one is told it won, and every
  reader sees that one's bytes whole or nothing.
- `claim` is the streaming source's write: a file holding the caller's token wins as in `write_new`; anything else
  in its place is kept under `<name>.rejected-<n>` (journal/ownership.py) and replaced, never overwritten unseen.
- `put_file` publishes a file built locally (a period file) whole, only if what is there is still the `version` the
  caller listed (None: nothing), and is durable when it returns True; `swap` does the same with bytes.
- `delete` never fails on a name already gone. `list` never follows a link out of the journal.
Names are relative to the journal's root, `/`-separated: `<cluster>/<day>/<tick>.json`.
Other URIs (hdfs://, gs://, ... through pyarrow.fs) cannot keep the first two promises, so they are refused.
"""
from __future__ import annotations

import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from quota_pipeline.journal.objstore import is_object_uri

SUPPORTED = "a local directory (a path or file://) or an S3-compatible object store (s3://bucket/prefix)"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
LOCAL_SCHEME = "file://"
NAME_IS = "the cluster's journal name (quota.pipeline.cluster.name or the config's file name)"
Step = Callable[[str], None]  # called after each step of a pass by name; tests inject failures (and kill -9) here


class UnsupportedJournalPath(ValueError):
    """A journal path on a storage the journal cannot keep its promises on; the message is one line."""


class JournalConflict(Exception):
    """A file's place kept being taken by files the job did not write; the message names the file."""


class JournalBusy(Exception):
    """Another process holds the cluster's journal lock (a pass of the job, or the command)."""


class NotRegularFile(ValueError):
    """A symlink, a FIFO, a directory where the journal keeps a file: never one the job wrote, never followed."""


@dataclass(frozen=True)
class StoredFile:
    """One file as `list` finds it; `version` changes whenever its content may have (size and mtime, or ETag)."""

    rel: str
    size: int
    mtime: float
    version: str


class Storage(Protocol):
    """The journal's files under one root; see the module's docstring for what each call promises."""

    delete_batch: int  # names `delete` takes at once (a step is reported after the first batch)

    def where(self, rel: str) -> str:
        """`rel` as a user would name it (a path, or an s3:// URI), for messages."""

    def checked(self, cluster: str) -> None:
        """Raises names.UnsafePath unless `cluster` names a place inside the root (before anything is written)."""

    def read(self, rel: str, limit: int | None = None) -> bytes | None:
        """The file's bytes (its first `limit` bytes), None when there is none; NotRegularFile for a link, a FIFO."""

    def get(self, rel: str) -> tuple[bytes, str] | None:
        """The file's bytes and version, None when there is none."""

    def write_new(self, rel: str, data: bytes) -> bool:
        """First writer wins: True when `data` is now the file, False when a file was there already."""

    def claim(self, rel: str, data: bytes, token: str) -> tuple[dict | None, list[tuple[str, str]]]:
        """(None, set aside) when `data` is now the file; (the record, set aside) when a file holding `token` was
        there first. Set aside: (rel, the name a file in its place that did not hold the token was moved to)."""

    def put(self, rel: str, data: bytes) -> None:
        """Replaces the file whole (last writer wins): for the cluster id the journal remembers."""

    def swap(self, rel: str, data: bytes, version: str | None) -> bool:
        """Replaces the file whole if its version is still `version` (None: if there is none); else False."""

    def put_file(self, rel: str, built: Path, version: str | None, step: Step) -> bool:
        """`swap` with a file built within `staged` beside its name, which it consumes; durable when True."""

    def list(self, cluster: str) -> list[StoredFile]:
        """The cluster's files (rel from the root), sorted; links are neither listed nor followed."""

    def delete(self, rels: list[str]) -> int:
        """Deletes the files (at most `delete_batch`), a file already gone being no error; how many it deleted
        (an object store, which does not say, counts every name)."""

    def remove_empty_dirs(self, rels: list[str]) -> None:
        """The directories of `rels` when nothing is left in them (a local journal's day directories)."""

    def staged(self, rels: list[str], versions: dict[str, str]) -> AbstractContextManager[Path | None]:
        """A local directory in which each of `rels` is at its name, for the duration; None when one of
        `versions` (rel: version) has changed since it was listed."""

    def open(self, rel: str):
        """A random-access file pyarrow reads (a period file's footer without reading the whole file)."""

    def lock(self, cluster: str, wait_s: float = 0.0) -> AbstractContextManager[bool]:
        """One maintenance pass per cluster at a time where that is needed (JournalBusy after `wait_s`); holds
        False when there is no journal of `cluster` (nothing to maintain: nothing is created)."""


def path_problem(root: str) -> str | None:
    """Why `root` cannot hold the journal, as one line (the scheme only: a URI may hold credentials), or None."""
    m = _SCHEME.match(root)
    if m is None or root.startswith(LOCAL_SCHEME) or is_object_uri(root):
        return None
    return (f"quota.pipeline.journal.path: {m.group(1)}:// is not supported (the journal needs first writer wins per "
            f"tick and compaction); use {SUPPORTED}")
