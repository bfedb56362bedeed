"""An s3:// journal's tick files: first writer wins by a conditional PUT; a compacted tick is read from its period file.

Where a local journal links a fsynced temporary file into place (link fails if the tick exists), an object store
PUTs the tick file with `If-None-Match: *`: the store refuses the second PUT of a key, atomically, so two attempts
at one tick never journal two snapshots. As on a local disk, a write that wins after compaction moved the first
attempt's tick file into a period file gives way to the compacted snapshot (and deletes its own tick file, which
readers skip anyway: the period file lists it).

`claim` is the streaming source's write: a new batch takes only an object holding its own token
(journal/ownership.py); any other object at the tick's key is copied aside to `<tick>.json.rejected-<n>` and
replaced by a PUT under `If-Match` on the ETag it was judged by, so neither a file planted meanwhile nor another
attempt of the same task is overwritten unseen, and no lock is needed.
"""
from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor

import isodate

from quota_pipeline.journal import layout, ownership, period_file
from quota_pipeline.journal.layout import Period
from quota_pipeline.journal.objstore import ObjectStore, ObjectStoreError, store_for

DOWNLOADS = 8  # parallel GETs of replay's copy
CONFLICT_TRIES = 5  # a 409 (a concurrent conditional PUT in flight) or a tick that vanished under us: try again


def write(store: ObjectStore, config_name: str, tick: int, tick_time: dt.datetime, text: str) -> dict | None:
    """Journal `text` as the tick's snapshot unless the tick is journaled already: None when this write is the
    one the journal holds, else the record it holds."""
    rel = f"{config_name}/{layout.tick_file(tick, tick_time)}"
    for _ in range(CONFLICT_TRIES):
        if store.put(rel, text.encode(), if_none_match=True) is not None:
            record = compacted(store, config_name, tick, tick_time)
            if record is not None:  # the first attempt's tick file was compacted away before this PUT
                store.delete(rel)
                return record
            return None
        got = store.get(rel)  # another attempt journaled this tick first
        if got is not None:
            return json.loads(got.data)
        record = compacted(store, config_name, tick, tick_time)  # ... and compaction moved it since
        if record is not None:
            return record
    raise ObjectStoreError(f"s3://{store.bucket}/{store.key(rel)}: conditional PUT kept conflicting; "
                           f"is another writer stuck?")


def claim(store: ObjectStore, rel: str, text: str, token: str) -> tuple[dict | None, list[tuple[str, str]]]:
    """Journal `text` at `rel` for the batch holding `token`: (None, what was set aside) when this PUT is the one
    the journal holds, (the record, ...) when an earlier attempt of the same task journaled the tick first."""
    data, aside = text.encode(), []
    for _ in range(CONFLICT_TRIES):
        if store.put(rel, data, if_none_match=True) is not None:
            return None, aside
        got = store.get(rel)
        if got is None:
            continue  # gone since the refused PUT: try again
        held = ownership.owned_record(got.data, token)
        if held is not None:
            return held, aside
        aside.append((rel, _keep_aside(store, rel, got.data)))
        if store.put(rel, data, if_match=got.etag) is not None:
            now = store.get(rel)  # a store whose If-Match is not atomic (S3Proxy) may have let a sibling win too
            if now is None or now.data == data:
                return None, aside
            held = ownership.owned_record(now.data, token)
            if held is not None:
                return held, aside
    raise ObjectStoreError(f"s3://{store.bucket}/{store.key(rel)}: replaced {CONFLICT_TRIES} times by objects this "
                           f"job did not write while it journaled its poll; who else writes the journal?")


def _keep_aside(store: ObjectStore, rel: str, data: bytes) -> str:
    for n in range(1, ownership.MAX_ASIDE + 1):
        name = ownership.aside_name(rel, n)
        if store.put(name, data, if_none_match=True) is not None:
            return name
    raise ObjectStoreError(f"s3://{store.bucket}/{store.key(rel)}: {ownership.MAX_ASIDE} rejected objects already "
                           f"beside it")


def compacted(store: ObjectStore, config_name: str, tick: int, tick_time: dt.datetime) -> dict | None:
    """The tick's record from the period file that replaced its tick file, if any."""
    got = store.get(f"{config_name}/{layout.PERIODS_FILE}")
    if got is None:
        return None  # nothing was ever compacted
    rel = layout.tick_file(tick, tick_time)
    for text in got.data.decode().split():
        key = f"{config_name}/{Period.containing(tick_time, isodate.parse_duration(text)).file}"
        try:
            with store.open_arrow(key) as fh:
                if rel not in period_file.read_footer(fh).sources:
                    continue
            with store.open_arrow(key) as fh:
                return period_file.read_tick(fh, rel, tick)
        except FileNotFoundError:
            continue
        except ValueError:
            continue  # not a period file of ours: nothing compacted there
    return None


def record_length(store: ObjectStore, config_name: str, length: dt.timedelta) -> None:
    """Adds `length` to the cluster's _periods object (read-modify-write under If-Match) before the first
    period file of that length exists, as compaction.record_length does on a local disk."""
    rel, text = f"{config_name}/{layout.PERIODS_FILE}", isodate.duration_isoformat(length)
    for _ in range(CONFLICT_TRIES):
        got = store.get(rel)
        known = got.data.decode().split() if got else []
        if text in known:
            return
        data = ("\n".join([*known, text]) + "\n").encode()
        if store.put(rel, data, if_none_match=got is None, if_match=got.etag if got else None) is not None:
            return
    raise ObjectStoreError(f"s3://{store.bucket}/{store.key(rel)}: kept changing under a conditional PUT")


def download(uri: str, dest) -> int:
    """A local copy of the s3:// journal (or any prefix of journal files) under `dest`, for replay; how many
    files. Tick files first, then the period files listed afresh: a tick file compacted between the two is in
    the period file copied after it, whose footer names it (replay reads it once); nothing is missed."""
    store = store_for(uri)
    wanted = [o.rel for o in store.list("") if not o.rel.endswith("/")]
    if not wanted and store.prefix:  # perhaps the URI names one object: a journal file
        parent, _, name = uri.rstrip("/").rpartition("/")
        return int(ObjectStore(parent).download(name, dest / name) is not None)
    with ThreadPoolExecutor(DOWNLOADS) as pool:  # small objects: latency, not bandwidth, bounds a copy
        copied = sum(pool.map(lambda rel: store.download(rel, dest / rel) is not None,
                              [rel for rel in wanted if not rel.endswith(".parquet")]))
        again = [o.rel for o in store.list("") if o.rel.endswith(".parquet")]
        return copied + sum(pool.map(lambda rel: store.download(rel, dest / rel) is not None, again))
