"""The session's S3Proxy for the object-store tests (harness/s3proxy.py); skipped, with the reason, where it can't."""
from __future__ import annotations

import os

import pytest

from harness.s3proxy import ENV, S3ProxyUnavailable, s3proxy_classpath, serve


@pytest.fixture(scope="session")
def s3proxy(tmp_path_factory):
    """S3Proxy on loopback with one bucket; the process's AWS_* variables point the code under test at it."""
    try:
        lib = s3proxy_classpath()
    except S3ProxyUnavailable as exc:
        pytest.skip(f"the object-store tests start S3Proxy: {exc}")
    saved = {k: os.environ.get(k) for k in (*ENV, "AWS_ENDPOINT_URL")}
    try:
        with serve(tmp_path_factory.mktemp("s3proxy"), lib) as server:
            os.environ.update({**ENV, "AWS_ENDPOINT_URL": server.endpoint})
            yield server
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
