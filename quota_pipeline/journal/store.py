"""The durable snapshot journal the streaming source writes: one JSON file per cluster and tick, on any storage.

Layout (journal/layout.py): <journal>/<config_name>/<YYYY-MM-DD>/<tick>.json, plus
<journal>/<config_name>/_cluster_id (the id last seen, so a failed poll in a fresh worker is still filed
under the right cluster); closed periods are compacted into period files (journal/maintenance.py), where
read() still finds a tick. `replay --input <journal>` reads it as it is. A tick is written first-writer-wins
(journal/storage.py: a link locally, a conditional PUT on s3://), so two attempts at the same tick can never
journal two different snapshots, also when the first was compacted already.

The streaming source journals through `claim`: a new micro-batch takes only a tick file it wrote itself (its
token, journal/ownership.py) and moves any other aside. Only the job's user may read or write the journal: the
directories it creates are 0700, its files 0600.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass

import isodate

from quota_pipeline.core.model import VolumeSnapshot
from quota_pipeline.core.snapshot_rules import parse_snapshot
from quota_pipeline.journal import layout, ownership, period_file
from quota_pipeline.journal.local_storage import LocalStorage
from quota_pipeline.journal.object_storage import ObjectStorage
from quota_pipeline.journal.objstore import is_object_uri, store_for
from quota_pipeline.journal.storage import LOCAL_SCHEME, JournalConflict, Storage, UnsupportedJournalPath, path_problem

CLUSTER_ID_FILE = "_cluster_id"
WRITE_TRIES = 5  # a tick file that vanished between a refused write and its read (compacted meanwhile): again


@functools.lru_cache(maxsize=64)
def storage_for(root: str) -> Storage:
    """The storage of the journal at `root` (one per root and process); UnsupportedJournalPath for other URIs."""
    problem = path_problem(root)
    if problem is not None:
        raise UnsupportedJournalPath(problem)
    if is_object_uri(root):
        return ObjectStorage(store_for(root))
    return LocalStorage(root.removeprefix(LOCAL_SCHEME))


@dataclass(frozen=True)
class Claimed:
    """What `Journal.claim` journaled for a tick and what it found there that the batch did not write."""

    snapshot: VolumeSnapshot
    set_aside: tuple[tuple[str, str], ...] = ()   # (tick file, the name it was moved to)
    listed_by_period_file: bool = False           # a period file claims the open tick: not the job's either


@dataclass(frozen=True)
class Journal:
    root: str

    def __post_init__(self) -> None:
        storage_for(self.root)  # an unsupported path is refused here, in one line, before anything is written

    @property
    def storage(self) -> Storage:
        return storage_for(self.root)

    def path(self, config_name: str, tick: int, tick_time: dt.datetime) -> str:
        return f"{config_name}/{layout.tick_file(tick, tick_time)}"

    def read(self, config_name: str, tick: int, tick_time: dt.datetime) -> VolumeSnapshot | None:
        data = self.storage.read(self.path(config_name, tick, tick_time))
        if data is not None:
            return parse_snapshot(json.loads(data.decode("utf-8")))
        # Tick file first, period file second: compaction deletes a tick file only after its period file is
        # in place, so a tick file missing because it was compacted is found below.
        record = self._compacted(config_name, tick, tick_time)
        return None if record is None else parse_snapshot(record)

    def _compacted(self, config_name: str, tick: int, tick_time: dt.datetime) -> dict | None:
        """The tick's record from the period file that replaced its tick file, if any (one footer per length)."""
        lengths = self.storage.read(f"{config_name}/{layout.PERIODS_FILE}")
        if lengths is None:
            return None  # nothing was ever compacted
        rel = layout.tick_file(tick, tick_time)
        for text in lengths.decode().split():
            key = f"{config_name}/{layout.Period.containing(tick_time, isodate.parse_duration(text)).file}"
            try:
                with self.storage.open(key) as fh:
                    if rel not in period_file.read_footer(fh).sources:
                        continue
                with self.storage.open(key) as fh:
                    return period_file.read_tick(fh, rel, tick)
            except FileNotFoundError:
                continue
            except ValueError:
                continue  # not a period file of ours: nothing compacted there
        return None

    def write(self, config_name: str, tick: int, tick_time: dt.datetime, snap: VolumeSnapshot) -> VolumeSnapshot:
        """Journal `snap` unless this tick is journaled already; returns what the journal holds."""
        rel = self.path(config_name, tick, tick_time)
        data = (json.dumps(snap.to_json(), separators=(",", ":")) + "\n").encode()
        for _ in range(WRITE_TRIES):
            if self.storage.write_new(rel, data):
                compacted = self._compacted(config_name, tick, tick_time)
                if compacted is not None:  # the first attempt's tick file was compacted away before this one
                    self.storage.delete([rel])
                    return parse_snapshot(compacted)
                return snap
            held = self.read(config_name, tick, tick_time)  # another attempt journaled this tick first
            if held is not None:
                return held
        raise JournalConflict(f"{ownership.shown(self.storage.where(rel))}: the tick's place kept being taken and "
                              f"emptied again while the job journaled it; who else writes the journal?")

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
        held, aside = self.storage.claim(rel, ownership.record_text(snap, token).encode(), token)
        listed = self._compacted(config_name, tick, tick_time) is not None
        return Claimed(snap if held is None else parse_snapshot(held), tuple(aside), listed)

    def last_cluster_id(self, config_name: str) -> str | None:
        data = self.storage.read(f"{config_name}/{CLUSTER_ID_FILE}")
        return data.decode("utf-8").strip() or None if data else None

    def remember_cluster_id(self, config_name: str, cluster_id: str) -> None:
        if self.last_cluster_id(config_name) != cluster_id:
            self.storage.put(f"{config_name}/{CLUSTER_ID_FILE}", cluster_id.encode())
