"""The local Kafka-compatible broker (Tansu, the demo's) the broker-side tests run against, one per test module."""
from __future__ import annotations

from typing import Iterator

import pytest

from quota_pipeline.demo.local_broker import BrokerUnavailable, LocalBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalBroker]:
    """One local broker per test module (about half a second to start)."""
    try:
        b = LocalBroker().start()
    except BrokerUnavailable as exc:
        pytest.skip(str(exc))
    yield b
    b.stop()
