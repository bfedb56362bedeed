"""One simulated request: counted, delayed or corrupted by the active faults, and answered from the state."""
from __future__ import annotations

import asyncio
import collections
import logging
import threading

from quota_pipeline.simulator import protocol
from quota_pipeline.simulator.state import SimulatedCluster

log = logging.getLogger(__name__)


class RequestCounts:
    """Requests served per (broker, API name), for tests and benchmarks that count round trips."""

    def __init__(self) -> None:
        self._counts: collections.Counter[tuple[int, str]] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, broker_id: int, api: str) -> None:
        with self._lock:
            self._counts[(broker_id, api if api in protocol.API_NAMES.values() else "other")] += 1

    def totals(self) -> dict[str, int]:
        """Requests served per API name (ApiVersions, Metadata, DescribeCluster, DescribeLogDirs, others)."""
        totals: collections.Counter[str] = collections.Counter()
        with self._lock:
            for (_, api), n in self._counts.items():
                totals[api] += n
        return dict(sorted(totals.items()))

    def by_broker(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = collections.defaultdict(dict)
        with self._lock:
            for (broker, api), n in sorted(self._counts.items()):
                out[broker][api] = n
        return dict(out)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


async def answer(state: SimulatedCluster, counts: RequestCounts, broker_id: int, payload: bytes) -> bytes | None:
    """The framed response to one request, or None to close the connection (as Kafka would)."""
    try:
        request = protocol.parse_request(payload)
    except Exception as exc:  # a request we cannot parse: Kafka closes the connection too
        log.warning("broker %s: undecodable request (%s), closing", broker_id, exc)
        return None
    api = request.api_name
    counts.add(broker_id, api)
    delay = state.delay_seconds(broker_id, api)
    if delay:
        await asyncio.sleep(delay)
    if not state.listening(broker_id):
        return None
    reply = protocol.respond(state, broker_id, request)
    if reply is None:
        log.info("broker %s: %s v%d is not simulated, closing", broker_id, api, request.api_version)
        return None
    response, _version = reply
    framed = protocol.encode_response(response, request.correlation_id)
    if state.has_fault("corrupt", broker_id, api):
        return protocol.truncate(framed)
    return framed
