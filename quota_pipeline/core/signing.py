"""Signed decision records: the pipeline signs each record with an HMAC-SHA-256 over its key and value, and a reader
given keys (quota.pipeline.signing.keys) refuses every record not signed with one of them, so that nobody else who
can write the decision topic can move the factor (docs/security.md).

The signature travels in the record header `quota-pipeline-signature` as `<key id>:<64 hex digits>`; the MAC is over
the key's length (4 bytes, big-endian; a missing key counts as empty), the key's bytes and the value's bytes exactly as
written to the topic, so no JSON is re-encoded to check it. The Java plugins' DecisionSignature is the same;
tests/vectors/broker_quota_vectors.json holds both to it.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable

HEADER = "quota-pipeline-signature"
KEYS_PROPERTY = "quota.pipeline.signing.keys"
MIN_SECRET_CHARS = 32
MAX_KEYS = 2
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_HEX = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class SigningKey:
    """One shared key: its id (named in the header) and its secret, which is never printed."""

    key_id: str
    secret: str = field(repr=False)

    def __str__(self) -> str:
        return f"{self.key_id}:******"


def parse_keys(raw: str) -> tuple[SigningKey, ...]:
    """`<id>:<secret>` entries, ','-separated, at most two; blank: none. Raises ValueError with the message shown
    after the property name (the Java callback's messages)."""
    keys = []
    for part in raw.split(","):
        entry = part.strip()
        if not entry:
            continue
        key_id, colon, secret = entry.partition(":")
        if not colon or not _ID.fullmatch(key_id.strip()):
            raise ValueError("each ','-separated key must be written <id>:<secret>, the id of letters, digits, '.', "
                             "'_' or '-' (at most 64 characters)")
        if len(secret.strip()) < MIN_SECRET_CHARS:
            raise ValueError(f"each key's secret must be at least {MIN_SECRET_CHARS} characters (for example the "
                             "output of openssl rand -base64 32)")
        keys.append(SigningKey(key_id.strip(), secret.strip()))
    if len(keys) > MAX_KEYS:
        raise ValueError("at most two keys: the one the pipeline signs with and one more during a rotation")
    seen: set[str] = set()
    for key in keys:
        if key.key_id in seen:
            raise ValueError(f"two keys have the id {key.key_id}: give each its own")
        seen.add(key.key_id)
    return tuple(keys)


def mac(secret: str, key: bytes | None, value: bytes) -> bytes:
    """HMAC-SHA-256 under `secret` (UTF-8) over the key's length, the key and the value."""
    k = key or b""
    return hmac.new(secret.encode("utf-8"), struct.pack(">I", len(k)) + k + value, hashlib.sha256).digest()


def sign(signing_key: SigningKey, key: bytes | None, value: bytes) -> bytes:
    """The header value for a record signed with `signing_key`."""
    return f"{signing_key.key_id}:{mac(signing_key.secret, key, value).hex()}".encode("ascii")


def signature_of(headers: Iterable[tuple[str, Any]] | None) -> bytes | None:
    """The value of the record's last signature header (as the Java reader's lastHeader), or None."""
    found = None
    for name, value in headers or ():
        if name == HEADER:
            found = value.encode("utf-8") if isinstance(value, str) else value
    return found


def valid(key_obj: SigningKey, key: bytes | None, value: bytes, digest_hex: str) -> bool:
    """Whether `digest_hex` (64 hex digits) is the MAC of the record under `key_obj`, compared in constant time."""
    return hmac.compare_digest(mac(key_obj.secret, key, value), bytes.fromhex(digest_hex))


def split(signature: bytes) -> tuple[str, str] | None:
    """(key id, hex digest) of a header value, or None when it is not `<key id>:<64 hex digits>`."""
    key_id, colon, digest = signature.decode("utf-8", "replace").rpartition(":")
    return (key_id, digest) if colon and _HEX.fullmatch(digest) else None
