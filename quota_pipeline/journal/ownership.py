"""Which tick files a micro-batch may take as its observation, as pure functions.

A new micro-batch journals its own poll and never takes a tick file it did not write: anyone who can write the
journal could otherwise plant a snapshot for a future tick ("all disks fine") and have it decided and published
instead of a poll. The driver gives each tick of a new batch a random token, which the tick file records
(`journal_token`): a tick file holding the token was written by an attempt of that very task (a retried or
duplicate task), so first writer wins among the job's own attempts; any other file in the tick's place is moved
aside to `<tick>.json.rejected-<n>`, a name no reader takes for a journal file (compaction and `Journal.read` match
`<tick>.json`, replay's `.json`/`.jsonl` suffixes), and the batch journals its poll in its place.
"""
from __future__ import annotations

import json
import secrets
from typing import Any

import orjson

from quota_pipeline.core.model import VolumeSnapshot

TOKEN_FIELD = "journal_token"
ASIDE_INFIX = ".rejected-"
MAX_ASIDE = 1000  # names tried for one tick's rejected files; more means someone fills the directory on purpose
SHOWN_CHARS = 200


def new_token() -> str:
    """Unguessable: a planted file can only carry it by copying the job's own file of that very tick."""
    return secrets.token_hex(16)


def record_text(snap: VolumeSnapshot, token: str) -> str:
    """The tick file's one line: the snapshot with the token of the batch that polled it (readers ignore it). Written
    for every cluster at every interval, so by orjson (a tenth of the standard encoder's time); a line that is not
    all ASCII (an outside name) or that orjson refuses (a lone surrogate) is the standard encoder's, escaped."""
    record = {**snap.to_json(), TOKEN_FIELD: token}
    try:
        data = orjson.dumps(record)
    except orjson.JSONEncodeError:
        data = b""
    if data and data.isascii():
        return data.decode("ascii") + "\n"
    return json.dumps(record, separators=(",", ":")) + "\n"


def owned_record(data: bytes | None, token: str) -> dict[str, Any] | None:
    """The record `data` holds when it carries `token` (an earlier attempt of the same task wrote it), else None."""
    if not data or not token:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) and record.get(TOKEN_FIELD) == token else None


def aside_name(name: str, n: int) -> str:
    return f"{name}{ASIDE_INFIX}{n}"


def shown(path: str) -> str:
    """A path for a log line: quoted, control characters escaped, at most SHOWN_CHARS characters of it."""
    cut = path if len(path) <= SHOWN_CHARS else path[:SHOWN_CHARS] + "..."
    return json.dumps(cut)
