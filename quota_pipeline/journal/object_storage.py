"""The journal's storage on an S3-compatible object store: atomic PUTs and conditional PUTs instead of rename.

An object is visible whole or not at all and durable once its PUT returns, so no temporary name is needed. First
writer wins by `If-None-Match: *`, which the store refuses once the key exists; a file replaces the version it
was listed with by `If-Match` on that ETag. Neither needs a lock, and a killed process leaves none behind.
"""
from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from quota_pipeline.core import names
from quota_pipeline.journal import ownership
from quota_pipeline.journal.objstore import ObjectStore, ObjectStoreError, store_for
from quota_pipeline.journal.storage import NAME_IS, StoredFile, Step

DOWNLOADS = 8  # parallel GETs (small objects: latency, not bandwidth, bounds a copy)
CONFLICT_TRIES = 5  # a 409 (a concurrent conditional PUT in flight) or an object that vanished under us: try again


class ObjectStorage:
    """The journal under one s3://bucket/prefix (objstore.ObjectStore, or anything with its get/put)."""

    delete_batch = 1000  # S3's DeleteObjects limit

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def where(self, rel: str) -> str:
        return f"s3://{self.store.bucket}/{self.store.key(rel)}"

    def checked(self, cluster: str) -> None:
        names.checked(cluster, NAME_IS)

    def read(self, rel: str, limit: int | None = None) -> bytes | None:
        got = self.store.get(rel, None if limit is None else (0, limit - 1))
        return None if got is None else got.data

    def get(self, rel: str) -> tuple[bytes, str] | None:
        got = self.store.get(rel)
        return None if got is None else (got.data, got.etag)

    def write_new(self, rel: str, data: bytes) -> bool:
        return self.store.put(rel, data, if_none_match=True) is not None

    def claim(self, rel: str, data: bytes, token: str) -> tuple[dict | None, list[tuple[str, str]]]:
        # Another object in the tick's place is copied aside and replaced under If-Match on the ETag it was judged
        # by: neither one planted meanwhile nor another attempt of the same task is overwritten unseen.
        store, aside = self.store, []
        for _ in range(CONFLICT_TRIES):
            if store.put(rel, data, if_none_match=True) is not None:
                return None, aside
            got = store.get(rel)
            if got is None:
                continue  # gone since the refused PUT: try again
            held = ownership.owned_record(got.data, token)
            if held is not None:
                return held, aside
            aside.append((rel, self._keep_aside(rel, got.data)))
            if store.put(rel, data, if_match=got.etag) is not None:
                now = store.get(rel)  # a store whose If-Match is not atomic (S3Proxy) may have let a sibling win too
                if now is None or now.data == data:
                    return None, aside
                held = ownership.owned_record(now.data, token)
                if held is not None:
                    return held, aside
        raise ObjectStoreError(f"{self.where(rel)}: replaced {CONFLICT_TRIES} times by objects this job did not "
                               f"write while it journaled its poll; who else writes the journal?")

    def _keep_aside(self, rel: str, data: bytes) -> str:
        for n in range(1, ownership.MAX_ASIDE + 1):
            name = ownership.aside_name(rel, n)
            if self.store.put(name, data, if_none_match=True) is not None:
                return name
        raise ObjectStoreError(f"{self.where(rel)}: {ownership.MAX_ASIDE} rejected objects already beside it")

    def put(self, rel: str, data: bytes) -> None:
        self.store.put(rel, data)

    def swap(self, rel: str, data: bytes, version: str | None) -> bool:
        return self.store.put(rel, data, if_none_match=version is None, if_match=version) is not None

    def put_file(self, rel: str, built: Path, version: str | None, step: Step) -> bool:
        done = self.swap(rel, built.read_bytes(), version)
        built.unlink()
        if done:
            step("uploaded")
        return done

    def list(self, cluster: str) -> list[StoredFile]:
        return [StoredFile(o.rel, o.size, o.mtime, o.etag) for o in self.store.list(f"{cluster}/")
                if not o.rel.endswith("/")]  # a "directory" marker some tools create

    def delete(self, rels: list[str]) -> int:
        self.store.delete_many(rels)
        return len(rels)

    def remove_empty_dirs(self, rels: list[str]) -> None:
        pass  # an object store has no directories

    @contextmanager
    def staged(self, rels: list[str], versions: dict[str, str]) -> Iterator[Path | None]:
        with tempfile.TemporaryDirectory(prefix="quota-pipeline-staged-") as tmp:
            local = Path(tmp)
            with ThreadPoolExecutor(DOWNLOADS) as pool:
                list(pool.map(lambda rel: self.store.download(rel, local / rel), rels))
            same = all(self.store.download(rel, local / rel) == v for rel, v in versions.items())
            yield local if same else None

    def open(self, rel: str):
        return self.store.open_arrow(rel)

    def lock(self, cluster: str, wait_s: float = 0.0):
        return nullcontext(True)  # conditional PUTs decide races: of two passes one PUT wins, the other deletes nothing


def download(uri: str, dest: Path) -> int:
    """A local copy of the s3:// journal (or any prefix of journal files) under `dest`, for replay; how many
    files. Tick files first, then the period files listed afresh: a tick file compacted between the two is in
    the period file copied after it, whose footer names it (replay reads it once); nothing is missed."""
    store = store_for(uri)
    wanted = [o.rel for o in store.list("") if not o.rel.endswith("/")]
    if not wanted and store.prefix:  # perhaps the URI names one object: a journal file
        parent, _, name = uri.rstrip("/").rpartition("/")
        return int(ObjectStore(parent).download(name, dest / name) is not None)
    with ThreadPoolExecutor(DOWNLOADS) as pool:
        copied = sum(pool.map(lambda rel: store.download(rel, dest / rel) is not None,
                              [rel for rel in wanted if not rel.endswith(".parquet")]))
        again = [o.rel for o in store.list("") if o.rel.endswith(".parquet")]
        return copied + sum(pool.map(lambda rel: store.download(rel, dest / rel) is not None, again))
