"""The durable snapshot journal the streaming source writes: one JSON file per cluster and tick.

Layout (journal/layout.py): <journal>/<config_name>/<YYYY-MM-DD>/<tick>.json, plus
<journal>/<config_name>/_cluster_id (the id last seen, so a failed poll in a fresh worker is still filed
under the right cluster); closed periods are compacted into period files (journal/compaction.py), where
read() still finds a tick. `replay --input <journal>` reads it as it is. Local paths are written
first-writer-wins (link), so two attempts at the same tick can never journal two different snapshots, also
when the first was compacted already; s3:// URIs keep the same rule with a conditional PUT
(journal/object_journal.py); other URIs go through pyarrow.fs (and are not compacted).

The streaming source journals through `claim`: a new micro-batch takes only a tick file it wrote itself (its
token, journal/ownership.py) and moves any other aside. Only the job's user may read or write the journal: the
directories it creates are 0700, its files 0600.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from quota_pipeline.core.model import VolumeSnapshot
from quota_pipeline.journal import layout, ownership
from quota_pipeline.journal.private import FILE_MODE, private_dirs, write_private
from quota_pipeline.core.snapshot_rules import parse_snapshot

CLUSTER_ID_FILE = "_cluster_id"
WRITE_LOCK_FILE = "_write_lock"  # serialises the job's own attempts at a tick while one moves a file aside
CLAIM_TRIES = 5  # each try moves one foreign file aside; more means someone keeps planting while the job writes


class JournalConflict(Exception):
    """A tick's place kept being taken by files the job did not write; the message names the tick file."""


@dataclass(frozen=True)
class Claimed:
    """What `Journal.claim` journaled for a tick and what it found there that the batch did not write."""

    snapshot: VolumeSnapshot
    set_aside: tuple[tuple[str, str], ...] = ()   # (tick file, the name it was moved to)
    listed_by_period_file: bool = False           # a period file claims the open tick: not the job's either




@dataclass(frozen=True)
class Journal:
    root: str

    @property
    def _is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")

    @property
    def _objects(self):
        from quota_pipeline.journal.objstore import is_object_uri, store_for

        return store_for(self.root) if is_object_uri(self.root) else None

    @property
    def _local_root(self) -> Path:
        return Path(self.root[len("file://"):] if self.root.startswith("file://") else self.root)

    def path(self, config_name: str, tick: int, tick_time: dt.datetime) -> str:
        return f"{config_name}/{layout.tick_file(tick, tick_time)}"

    def read(self, config_name: str, tick: int, tick_time: dt.datetime) -> VolumeSnapshot | None:
        text = self._read_text(self.path(config_name, tick, tick_time))
        if text is not None:
            return parse_snapshot(json.loads(text))
        # Tick file first, period file second: compaction deletes a tick file only after its period file is
        # in place, so a tick file missing because it was compacted is found below.
        record = self._compacted(config_name, tick, tick_time)
        return None if record is None else parse_snapshot(record)

    def _compacted(self, config_name: str, tick: int, tick_time: dt.datetime) -> dict | None:
        """The tick's record from the period file that replaced its tick file, if any (one stat per length)."""
        if not self._is_local:
            from quota_pipeline.journal import object_journal

            store = self._objects
            return None if store is None else object_journal.compacted(store, config_name, tick, tick_time)
        cluster_dir = self._local_root / config_name
        try:
            lengths = (cluster_dir / layout.PERIODS_FILE).read_text().split()
        except FileNotFoundError:
            return None  # nothing was ever compacted
        import isodate

        from quota_pipeline.journal import period_file

        rel = layout.tick_file(tick, tick_time)
        for text in lengths:
            path = cluster_dir / layout.Period.containing(tick_time, isodate.parse_duration(text)).file
            if path.exists():
                sources = period_file.sources_of(path)
                if sources is not None and rel in sources:
                    return period_file.read_tick(path, rel, tick)
        return None

    def write(self, config_name: str, tick: int, tick_time: dt.datetime, snap: VolumeSnapshot) -> VolumeSnapshot:
        """Journal `snap` unless this tick is journaled already; returns what the journal holds."""
        rel = self.path(config_name, tick, tick_time)
        text = json.dumps(snap.to_json(), separators=(",", ":")) + "\n"
        if self._is_local:
            target = self._local_root / rel
            private_dirs(target.parent)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=layout.WRITER_TMP_PREFIX)  # 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.link(tmp, target)  # fails if another attempt journaled this tick first
            except FileExistsError:
                return self.read(config_name, tick, tick_time) or snap
            finally:
                os.unlink(tmp)
            compacted = self._compacted(config_name, tick, tick_time)
            if compacted is not None:  # the first attempt's tick file was compacted away before this one
                target.unlink(missing_ok=True)
                return parse_snapshot(compacted)
            return snap
        if (store := self._objects) is not None:
            from quota_pipeline.journal import object_journal

            held = object_journal.write(store, config_name, tick, tick_time, text)
            return snap if held is None else parse_snapshot(held)
        existing = self.read(config_name, tick, tick_time)
        if existing is not None:
            return existing
        fs, base = self._fs()
        fs.create_dir(f"{base}/{rel.rsplit('/', 1)[0]}", recursive=True)
        with fs.open_output_stream(f"{base}/{rel}.tmp") as out:
            out.write(text.encode())
        fs.move(f"{base}/{rel}.tmp", f"{base}/{rel}")
        return snap

    def read_valid(self, config_name: str, tick: int, tick_time: dt.datetime) -> VolumeSnapshot | None:
        """`read`, with a tick file that is not a valid snapshot taken for none: the job writes its tick files whole
        (fsync, then link or PUT), so such a file is not one it wrote, and a re-run polls instead of failing on it."""
        try:
            return self.read(config_name, tick, tick_time)
        except (ValueError, RecursionError, OSError):  # JSONDecodeError, RecordError, UnicodeDecodeError, a directory
            return None

    def claim(self, config_name: str, tick: int, tick_time: dt.datetime, snap: VolumeSnapshot,
              token: str) -> Claimed:
        """Journal `snap`, polled by the batch whose token for this tick is `token`. A tick file holding that token
        (an earlier attempt of the same task) wins, as in `write`; any other file in its place is moved aside to
        `<tick>.json.rejected-<n>` and `snap` is journaled instead. A period file listing the tick is not taken
        either: a new batch's tick is in an open period, which compaction never touches."""
        rel = self.path(config_name, tick, tick_time)
        text = ownership.record_text(snap, token)
        if self._is_local:
            held, aside = self._claim_local(config_name, rel, text, token)
        elif (store := self._objects) is not None:
            from quota_pipeline.journal import object_journal

            held, aside = object_journal.claim(store, rel, text, token)
        else:
            held, aside = self._claim_fs(rel, text, token)
        listed = self._compacted(config_name, tick, tick_time) is not None
        return Claimed(snap if held is None else parse_snapshot(held), tuple(aside), listed)

    def _claim_local(self, config_name: str, rel: str, text: str,
                     token: str) -> tuple[dict | None, list[tuple[str, str]]]:
        target = self._local_root / rel
        private_dirs(target.parent)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=layout.WRITER_TMP_PREFIX)  # 0600
        aside: list[tuple[str, str]] = []
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            with self._write_lock(config_name):
                for _ in range(CLAIM_TRIES):
                    try:
                        os.link(tmp, target)  # fails if the tick's place is taken
                        return None, aside
                    except FileExistsError:
                        pass
                    try:
                        held = ownership.owned_record(_regular_file_bytes(target), token)
                    except (NotRegularFile, OSError):
                        held = None
                    if held is not None:
                        return held, aside
                    moved = _move_aside(target)
                    if moved is not None:
                        aside.append((rel, f"{rel.rsplit('/', 1)[0]}/{moved}"))
        finally:
            os.unlink(tmp)
        raise JournalConflict(f"{ownership.shown(str(target))}: replaced {CLAIM_TRIES} times by files this job did "
                              "not write while it journaled its poll; who else writes the journal?")

    @contextmanager
    def _write_lock(self, config_name: str) -> Iterator[None]:
        """The job's own attempts at a tick, one at a time (flock: released by the kernel if the holder dies): one
        cannot then move aside a file another attempt has just linked. Anyone else's file is moved aside anyway."""
        fd = os.open(self._local_root / config_name / WRITE_LOCK_FILE, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW,
                     FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _claim_fs(self, rel: str, text: str, token: str) -> tuple[dict | None, list[tuple[str, str]]]:
        """Other filesystems (pyarrow.fs): no atomic first-writer-wins there, as in `write`."""
        fs, base = self._fs()
        aside: list[tuple[str, str]] = []
        existing = self._read_text(rel)
        if existing is not None:
            held = ownership.owned_record(existing.encode(), token)
            if held is not None:
                return held, aside
            import pyarrow.fs as pafs

            n = next(n for n in range(1, ownership.MAX_ASIDE + 1) if fs.get_file_info(
                f"{base}/{ownership.aside_name(rel, n)}").type == pafs.FileType.NotFound)
            fs.move(f"{base}/{rel}", f"{base}/{ownership.aside_name(rel, n)}")
            aside.append((rel, ownership.aside_name(rel, n)))
        fs.create_dir(f"{base}/{rel.rsplit('/', 1)[0]}", recursive=True)
        with fs.open_output_stream(f"{base}/{rel}.tmp") as out:
            out.write(text.encode())
        fs.move(f"{base}/{rel}.tmp", f"{base}/{rel}")
        return None, aside

    def last_cluster_id(self, config_name: str) -> str | None:
        text = self._read_text(f"{config_name}/{CLUSTER_ID_FILE}")
        return text.strip() or None if text else None

    def remember_cluster_id(self, config_name: str, cluster_id: str) -> None:
        if self.last_cluster_id(config_name) == cluster_id:
            return
        if self._is_local:
            target = self._local_root / config_name / CLUSTER_ID_FILE
            private_dirs(target.parent)
            write_private(target, cluster_id.encode())
            return
        if (store := self._objects) is not None:
            store.put(f"{config_name}/{CLUSTER_ID_FILE}", cluster_id.encode())
            return
        fs, base = self._fs()
        fs.create_dir(f"{base}/{config_name}", recursive=True)
        with fs.open_output_stream(f"{base}/{config_name}/{CLUSTER_ID_FILE}") as out:
            out.write(cluster_id.encode())

    def _read_text(self, rel: str) -> str | None:
        if self._is_local:
            data = _regular_file_bytes(self._local_root / rel)
            return None if data is None else data.decode("utf-8")
        if (store := self._objects) is not None:
            got = store.get(rel)
            return None if got is None else got.data.decode("utf-8")
        fs, base = self._fs()
        import pyarrow.fs as pafs

        if fs.get_file_info(f"{base}/{rel}").type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(f"{base}/{rel}") as fh:
            return fh.read().decode("utf-8")

    def _fs(self):
        import pyarrow.fs as pafs

        fs, base = pafs.FileSystem.from_uri(self.root)
        return fs, base.rstrip("/")


class NotRegularFile(ValueError):
    """A symlink, a FIFO, a directory where the journal keeps a file: never one the job wrote, never followed."""


def _regular_file_bytes(path: Path) -> bytes | None:
    """The bytes of the regular file at `path`, None when there is nothing; NotRegularFile for anything else (it
    is neither followed nor opened: a FIFO would block the reader)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise NotRegularFile(f"{ownership.shown(str(path))}: not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


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
