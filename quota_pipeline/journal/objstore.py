"""An s3:// journal's objects through boto3: conditional puts (If-None-Match, If-Match), reads, listing, deletes.

Object stores have no rename and no directory fsync; what they have is an atomic PUT (an object is visible whole
or not at all, durable when the PUT returns) and conditional PUTs (S3 since 2024, S3Proxy, MinIO, Ceph). The
journal's guarantees rest on those two (journal/object_storage.py says how).

Endpoint and credentials come from where the AWS SDKs look (boto3 and pyarrow's S3FileSystem alike):
AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) for an S3-compatible server, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
AWS_PROFILE, instance or pod roles. Neither is ever printed.
"""
from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from functools import cached_property

SCHEME = "s3://"


def is_object_uri(root: str) -> bool:
    return root.startswith(SCHEME)


class ObjectStoreError(Exception):
    """The object store refused or failed a request; the message names the bucket and key, never credentials."""


@dataclass(frozen=True)
class Obj:
    rel: str          # relative to the store's prefix
    size: int
    etag: str
    mtime: float


@dataclass(frozen=True)
class Got:
    data: bytes
    etag: str


class ObjectStore:
    """The objects under one s3://bucket/prefix; keys are given relative to the prefix."""

    def __init__(self, uri: str) -> None:
        if not is_object_uri(uri):
            raise ValueError(f"{uri}: not an s3:// URI")
        bucket, _, prefix = uri[len(SCHEME):].partition("/")
        self.uri, self.bucket, self.prefix = uri, bucket, prefix.strip("/")

    @cached_property
    def _client(self):
        try:
            import boto3
        except ImportError:
            raise ObjectStoreError("an s3:// journal needs boto3: python3 -m pip install 'quota-pipeline[s3]'") \
                from None
        return boto3.client("s3")

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _failed(self, rel: str, exc: Exception) -> ObjectStoreError:
        return ObjectStoreError(f"s3://{self.bucket}/{self.key(rel)}: {_code(exc) or exc}")

    def get(self, rel: str, byte_range: tuple[int, int] | None = None) -> Got | None:
        """The object's bytes (a range of them: [first, last]) and ETag, or None when there is none."""
        extra = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else {}
        try:
            r = self._client.get_object(Bucket=self.bucket, Key=self.key(rel), **extra)
            return Got(r["Body"].read(), r["ETag"])
        except Exception as exc:  # noqa: BLE001 - botocore raises ClientError and connection errors
            if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            if byte_range and _code(exc) in ("InvalidRange", "416"):
                return Got(b"", "")  # an empty object has no first byte
            raise self._failed(rel, exc) from None

    def put(self, rel: str, data: bytes, if_none_match: bool = False, if_match: str | None = None) -> str | None:
        """PUT the object; with a condition, None when it does not hold (412, or 404 for If-Match on no
        object; 409 when a concurrent conditional PUT is in flight): someone else wrote first. Returns the ETag."""
        extra = {"IfNoneMatch": "*"} if if_none_match else {"IfMatch": if_match} if if_match else {}
        try:
            return self._client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, **extra)["ETag"]
        except Exception as exc:  # noqa: BLE001
            if extra and _code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "404", "ConditionalRequestConflict"):
                return None
            raise self._failed(rel, exc) from None

    def delete(self, rel: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.key(rel))  # no error when it is gone
        except Exception as exc:  # noqa: BLE001
            raise self._failed(rel, exc) from None

    def delete_many(self, keys: list[str]) -> None:
        """Deletes up to 1,000 objects (relative keys) in one request; a key already gone is no error."""
        if not keys:
            return
        try:
            r = self._client.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": self.key(k)} for k in keys], "Quiet": True})
        except Exception as exc:  # noqa: BLE001
            raise self._failed(keys[0], exc) from None
        errors = [e for e in r.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            raise ObjectStoreError(f"s3://{self.bucket}/{errors[0].get('Key')}: not deleted: "
                                   f"{errors[0].get('Code')} ({len(errors)} key(s))")

    def list(self, rel_prefix: str) -> list[Obj]:
        """Every object whose key starts with prefix/rel_prefix, sorted by key."""
        out: list[Obj] = []
        base = self.key("")
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                           Prefix=self.key(rel_prefix))
            for page in pages:
                for o in page.get("Contents", []):
                    mtime = o["LastModified"]
                    out.append(Obj(o["Key"][len(base):], o["Size"], o.get("ETag", ""),
                                   mtime.timestamp() if isinstance(mtime, dt.datetime) else 0.0))
        except Exception as exc:  # noqa: BLE001
            raise self._failed(rel_prefix, exc) from None
        return sorted(out, key=lambda o: o.rel)

    @cached_property
    def _arrow(self):
        import pyarrow.fs as pafs

        return pafs.FileSystem.from_uri(self.uri)

    def open_arrow(self, rel: str):
        """A pyarrow random-access file over the object (ranged GETs: a Parquet footer without the whole file)."""
        fs, base = self._arrow
        return fs.open_input_file(f"{base.rstrip('/')}/{rel}")

    def download(self, rel: str, dest) -> str | None:
        """The object written to local path `dest`; its ETag, or None when there is none."""
        got = self.get(rel)
        if got is None:
            return None
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(got.data)
        return got.etag


@functools.lru_cache(maxsize=64)
def store_for(uri: str) -> ObjectStore:
    """One ObjectStore (one boto3 client, one pyarrow file system) per URI and process: a client takes tens of
    milliseconds to build, more than a request; both are safe to share between threads."""
    return ObjectStore(uri)


def _code(exc: Exception) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get(
            "HTTPStatusCode") or "") or None
    return None
