"""The durable snapshot journal the streaming source writes: one JSON file per cluster and tick.

Layout (journal/layout.py): <journal>/<config_name>/<YYYY-MM-DD>/<tick>.json, plus
<journal>/<config_name>/_cluster_id (the id last seen, so a failed poll in a fresh worker is still filed
under the right cluster); closed periods are compacted into period files (journal/compaction.py), where
read() still finds a tick. `replay --input <journal>` reads it as it is. Local paths are written
first-writer-wins (link), so two attempts at the same tick can never journal two different snapshots, also
when the first was compacted already; s3:// URIs keep the same rule with a conditional PUT
(journal/object_journal.py); other URIs go through pyarrow.fs (and are not compacted).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from quota_pipeline.core.model import VolumeSnapshot
from quota_pipeline.journal import layout
from quota_pipeline.journal.rules import parse_snapshot

CLUSTER_ID_FILE = "_cluster_id"


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
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
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

    def last_cluster_id(self, config_name: str) -> str | None:
        text = self._read_text(f"{config_name}/{CLUSTER_ID_FILE}")
        return text.strip() or None if text else None

    def remember_cluster_id(self, config_name: str, cluster_id: str) -> None:
        if self.last_cluster_id(config_name) == cluster_id:
            return
        if self._is_local:
            target = self._local_root / config_name / CLUSTER_ID_FILE
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".tmp-{os.getpid()}")
            tmp.write_text(cluster_id)
            os.replace(tmp, target)
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
            try:
                return (self._local_root / rel).read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
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
