"""The journal's storage on a local file system: link for first writer wins, fsync and rename, flock; 0700/0600."""
from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from quota_pipeline.core import names
from quota_pipeline.journal import layout, ownership
from quota_pipeline.journal.private import FILE_MODE, fsync_dir, private_dirs, write_private
from quota_pipeline.journal.storage import NAME_IS, StoredFile, JournalBusy, JournalConflict, NotRegularFile, Step

WRITE_LOCK_FILE = "_write_lock"  # serialises the job's own attempts at a tick while one moves a file aside
CLAIM_TRIES = 5  # each try moves one foreign file aside; more means someone keeps planting while the job writes


class LocalStorage:
    """The journal under one local directory. Writers (tasks of the job, on any host sharing the directory) never
    take a lock but `claim`'s; a maintenance pass holds the cluster's `_lock` (flock, released when it dies)."""

    delete_batch = 1  # one unlink at a time: a pass killed between two leaves every other file as it was

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def checked(self, cluster: str) -> None:
        names.checked(cluster, NAME_IS)
        names.inside(self.root, self.root / cluster)

    def read(self, rel: str, limit: int | None = None) -> bytes | None:
        got = self._open_regular(rel)
        if got is None:
            return None
        with os.fdopen(got, "rb") as fh:
            return fh.read() if limit is None else fh.read(limit)

    def get(self, rel: str) -> tuple[bytes, str] | None:
        got = self._open_regular(rel)
        if got is None:
            return None
        with os.fdopen(got, "rb") as fh:
            return fh.read(), _version(os.fstat(fh.fileno()))

    def _open_regular(self, rel: str) -> int | None:
        """A descriptor of the regular file at `rel`, None when there is nothing; NotRegularFile for anything else
        (it is neither followed nor opened: a FIFO would block the reader)."""
        path = self.root / rel
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise NotRegularFile(f"{ownership.shown(str(path))}: not a regular file")
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None

    @contextmanager
    def _temporary(self, rel: str, data: bytes) -> Iterator[str]:
        """`data` in a fsynced 0600 temporary file beside `rel` (readers skip dot names), removed afterwards."""
        target = self.root / rel
        private_dirs(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=layout.WRITER_TMP_PREFIX)  # 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            yield tmp
        finally:
            os.unlink(tmp)

    def write_new(self, rel: str, data: bytes) -> bool:
        with self._temporary(rel, data) as tmp:
            try:
                os.link(tmp, self.root / rel)  # fails if another writer linked this name first
                return True
            except FileExistsError:
                return False

    def claim(self, rel: str, data: bytes, token: str) -> tuple[dict | None, list[tuple[str, str]]]:
        target, aside = self.root / rel, []
        with self._temporary(rel, data) as tmp, self._write_lock(rel.split("/", 1)[0]):
            for _ in range(CLAIM_TRIES):
                try:
                    os.link(tmp, target)  # fails if the tick's place is taken
                    return None, aside
                except FileExistsError:
                    pass
                try:
                    held = ownership.owned_record(self.read(rel), token)
                except (NotRegularFile, OSError):
                    held = None
                if held is not None:
                    return held, aside
                moved = _move_aside(target)
                if moved is not None:
                    aside.append((rel, f"{rel.rsplit('/', 1)[0]}/{moved}"))
        raise JournalConflict(f"{ownership.shown(str(target))}: replaced {CLAIM_TRIES} times by files this job did "
                              "not write while it journaled its poll; who else writes the journal?")

    @contextmanager
    def _write_lock(self, cluster: str) -> Iterator[None]:
        """The job's own attempts at a tick, one at a time (flock: released by the kernel if the holder dies): one
        cannot then move aside a file another attempt has just linked. Anyone else's file is moved aside anyway."""
        fd = os.open(self.root / cluster / WRITE_LOCK_FILE, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def put(self, rel: str, data: bytes) -> None:
        target = self.root / rel
        private_dirs(target.parent)
        write_private(target, data)

    def swap(self, rel: str, data: bytes, version: str | None) -> bool:
        # Only a maintenance pass swaps, under the cluster's lock: the check and the rename do not race the job.
        if self._version(rel) != version:
            return False
        self.put(rel, data)
        fsync_dir((self.root / rel).parent)
        return True

    def put_file(self, rel: str, built: Path, version: str | None, step: Step) -> bool:
        final = self.root / rel
        os.chmod(built, FILE_MODE)  # the journal is the job user's alone, as its tick files are
        with built.open("rb") as fh:
            os.fsync(fh.fileno())
        step("written")
        if self._version(rel) != version:
            built.unlink()
            return False
        os.replace(built, final)  # atomic: readers see the old file or the new one, whole
        fsync_dir(final.parent)
        step("renamed")
        return True

    def _version(self, rel: str) -> str | None:
        try:
            return _version(os.lstat(self.root / rel))
        except FileNotFoundError:
            return None

    def list(self, cluster: str) -> list[StoredFile]:
        # Symlinks are never followed nor listed: nothing is read, compacted or deleted outside the cluster's directory.
        out: list[StoredFile] = []
        for top in _entries(self.root / cluster):
            if top.is_dir(follow_symlinks=False) and layout.DAY_DIR.match(top.name):
                out += [e for f in _entries(Path(top.path)) if (e := _entry(f, f"{cluster}/{top.name}/{f.name}"))]
            elif (e := _entry(top, f"{cluster}/{top.name}")) is not None:
                out.append(e)
        return sorted(out, key=lambda e: e.rel)

    def delete(self, rels: list[str]) -> int:
        removed = 0
        for rel in rels:
            try:
                (self.root / rel).unlink()
                removed += 1
            except FileNotFoundError:
                pass  # a concurrent writer's own clean-up, or a previous pass's
        return removed

    def remove_empty_dirs(self, rels: list[str]) -> None:
        for d in sorted({(self.root / rel).parent for rel in rels}):
            try:
                d.rmdir()
            except OSError:
                pass  # not empty: other periods of that day remain

    @contextmanager
    def staged(self, rels: list[str], versions: dict[str, str]) -> Iterator[Path | None]:
        yield self.root if all(self._version(rel) == v for rel, v in versions.items()) else None

    def open(self, rel: str):
        return pa.OSFile(str(self.root / rel))

    @contextmanager
    def lock(self, cluster: str, wait_s: float = 0.0) -> Iterator[bool]:
        """The cluster's maintenance lock (flock: released by the kernel if the holder dies, kill -9 included)."""
        cluster_dir = self.root / cluster
        if not cluster_dir.is_dir():
            yield False  # no journal of that cluster: nothing to maintain, and no directory made for it
            return
        fd = os.open(cluster_dir / layout.LOCK_FILE, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, FILE_MODE)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise JournalBusy(f"another process is maintaining {cluster_dir} (the streaming job?); "
                                          f"try again in a minute") from None
                    time.sleep(0.2)
            yield True
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def _version(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _entries(path: Path) -> list[os.DirEntry]:
    try:
        return sorted(os.scandir(path), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):  # a day directory emptied and removed by retention meanwhile
        return []


def _entry(f: os.DirEntry, rel: str) -> StoredFile | None:
    """The regular file `f` as listed, or None (a link, a directory, a file gone since the directory was read)."""
    try:
        if not f.is_file(follow_symlinks=False):
            return None
        st = f.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    return StoredFile(rel, st.st_size, st.st_mtime, _version(st))


def _move_aside(target: Path) -> str | None:
    """Renames what is at `target` (a file, a symlink, anything) to the first free `<name>.rejected-<n>`; the new
    name, or None when it went away meanwhile."""
    for n in range(1, ownership.MAX_ASIDE + 1):
        aside = target.with_name(ownership.aside_name(target.name, n))
        if os.path.lexists(aside):
            continue
        try:
            os.rename(target, aside)
            return aside.name
        except FileNotFoundError:
            return None
        except OSError:
            continue  # a directory in the way of one name: try the next
    raise JournalConflict(f"{ownership.shown(str(target))}: {ownership.MAX_ASIDE} rejected files already beside it")
