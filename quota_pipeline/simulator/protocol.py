"""Kafka wire protocol for the simulator: decode requests and build responses with kafka-python's message classes."""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    DescribeClusterRequest, DescribeClusterResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
)
from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.schemas.fields.codecs import Int32

from quota_pipeline.simulator import quota_store
from quota_pipeline.simulator.state import Broker, SimulatedCluster

UNSUPPORTED_VERSION = 35
UNKNOWN_TOPIC_OR_PARTITION = 3
BROKERS_ENDPOINT = 1  # DescribeCluster endpoint_type: 1 = brokers, 2 = controllers

REQUESTS: dict[int, type[ApiMessage]] = {
    ApiKey.ApiVersions: ApiVersionsRequest,
    ApiKey.Metadata: MetadataRequest,
    ApiKey.DescribeCluster: DescribeClusterRequest,
    ApiKey.DescribeLogDirs: DescribeLogDirsRequest,
    **quota_store.REQUESTS,
}
API_NAMES = {int(k): ApiKey(k).name for k in REQUESTS}

# Every version kafka-python (and therefore this simulator) can encode; librdkafka negotiates within these.
# DescribeLogDirs v0 is gone since Kafka 4.0 (KIP-896), hence min 1.
CURRENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.ApiVersions: (0, ApiVersionsResponse.max_version),
    ApiKey.Metadata: (0, MetadataResponse.max_version),
    ApiKey.DescribeCluster: (0, DescribeClusterResponse.max_version),
    ApiKey.DescribeLogDirs: (1, DescribeLogDirsResponse.max_version),
    ApiKey.DescribeClientQuotas: (0, 1), ApiKey.AlterClientQuotas: (0, 1),
}
# A Kafka 3.2 broker: DescribeLogDirs v3 has no TotalBytes/UsableBytes (KIP-827 came with v4 in 3.3),
# DescribeCluster v0 has no fenced brokers (KIP-1073).
OLD_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.ApiVersions: (0, 3),
    ApiKey.Metadata: (0, 12),
    ApiKey.DescribeCluster: (0, 0),
    ApiKey.DescribeLogDirs: (0, 3),
    ApiKey.DescribeClientQuotas: (0, 1), ApiKey.AlterClientQuotas: (0, 1),
}


@dataclass
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: ApiMessage | None  # None when the API or version is not one we decode

    @property
    def api_name(self) -> str:
        return API_NAMES.get(self.api_key) or _api_name(self.api_key)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api-{api_key}"


def parse_request(payload: bytes) -> Request:
    """Decode one request (without its 4-byte size). The v1 header prefix is the same for every request,
    so read it first, then re-read the header as v2 (tagged fields) if this API version is flexible."""
    header = RequestHeader.decode(io.BytesIO(payload), flexible=False)
    key, version = header.request_api_key, header.request_api_version
    cls = REQUESTS.get(key)
    if cls is None or not 0 <= version <= cls.max_version:
        return Request(key, version, header.correlation_id, header.client_id, None)
    buf = io.BytesIO(payload)
    header = RequestHeader.decode(buf, flexible=cls.flexible_version_q(version))
    body = cls.decode(buf.read(), version=version)
    return Request(key, version, header.correlation_id, header.client_id, body)


def encode_response(response: ApiMessage, correlation_id: int) -> bytes:
    """The framed response bytes (size, header, body) as kafka-python encodes them, in the
    version the response was built with."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def truncate(framed: bytes) -> bytes:
    """A response cut in half but framed consistently: the client reads it, then fails to decode it."""
    payload = framed[4:][: max(4, (len(framed) - 4) // 2)]
    return bytes(Int32.encode(len(payload))) + payload


def supported_versions(state: SimulatedCluster, broker_id: int) -> dict[int, tuple[int, int]]:
    return OLD_VERSIONS if state.has_fault("old_protocol", broker_id) else CURRENT_VERSIONS


def respond(state: SimulatedCluster, broker_id: int, request: Request) -> tuple[ApiMessage, int] | None:
    """The response message and the version to encode it in; None means close the connection."""
    versions = supported_versions(state, broker_id)
    if request.api_key == ApiKey.ApiVersions:
        return api_versions(versions, request)
    low_high = versions.get(request.api_key)
    if request.body is None or low_high is None or not low_high[0] <= request.api_version <= low_high[1]:
        return error_response(request.api_key, request.api_version, UNSUPPORTED_VERSION)
    if request.api_key == ApiKey.Metadata:
        return metadata(state, request), request.api_version
    if request.api_key == ApiKey.DescribeCluster:
        return describe_cluster(state, broker_id, request), request.api_version
    if request.api_key in quota_store.RESPONDERS:
        responder = quota_store.RESPONDERS[request.api_key]
        return responder(state.client_quotas, request.body, request.api_version), request.api_version
    return describe_log_dirs(state, broker_id, request), request.api_version


def api_versions(versions: dict[int, tuple[int, int]], request: Request) -> tuple[ApiMessage, int]:
    high = versions[ApiKey.ApiVersions][1]
    # A client asking for a newer ApiVersions than we know gets a v0 error listing what we support,
    # and retries with our maximum (KIP-511); that is how librdkafka and kafka-python negotiate.
    ok = request.api_version <= high
    version = request.api_version if ok else 0
    keys = [ApiVersionsResponse.ApiVersion(version=version, api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(versions.items())]
    return ApiVersionsResponse(version=version, error_code=0 if ok else UNSUPPORTED_VERSION, api_keys=keys,
                               throttle_time_ms=0), version


def error_response(api_key: int, version: int, error_code: int) -> tuple[ApiMessage, int] | None:
    """A default response of the requested API carrying error_code, when that API has a top-level
    error_code; otherwise None (close the connection, as Kafka does with a request it cannot parse)."""
    cls = ResponseClassRegistry._response_class_registry.get(api_key)
    if cls is None or not 0 <= version <= cls.max_version or "error_code" not in cls.fields:
        return None
    cls = cls[None]  # the registry may hold a version-pinned class; build from the primary one
    response = cls(version=version)
    if not cls.fields["error_code"].for_version_q(version):
        return None
    response.error_code = error_code
    return response, version


def _controller(brokers: list[Broker]) -> int:
    # KRaft brokers report a random live broker as controller; the lowest id keeps responses stable.
    return min((b.broker_id for b in brokers), default=-1)


def metadata(state: SimulatedCluster, request: Request) -> ApiMessage:
    v = request.api_version
    live = state.unfenced_brokers()  # KRaft Metadata lists unfenced brokers only
    brokers = [MetadataResponse.MetadataResponseBroker(version=v, node_id=b.broker_id, host=state.host,
                                                       port=b.port, rack=b.rack) for b in live]
    body: Any = request.body
    asked = body.topics or []
    # The simulator hosts no topics: any named topic is unknown.
    topics = [MetadataResponse.MetadataResponseTopic(
        version=v, error_code=UNKNOWN_TOPIC_OR_PARTITION, name=t.name, is_internal=False, partitions=[])
        for t in asked if t.name]
    return MetadataResponse(version=v, throttle_time_ms=0, brokers=brokers, cluster_id=state.cluster_id,
                            controller_id=_controller(live), topics=topics)


def describe_cluster(state: SimulatedCluster, broker_id: int, request: Request) -> ApiMessage:
    v = request.api_version
    body: Any = request.body
    fault = state.has_fault("describe_cluster_error", broker_id)
    if fault is not None:
        return DescribeClusterResponse(version=v, error_code=fault.error_code,
                                       error_message="simulated describe_cluster_error fault",
                                       cluster_id=state.cluster_id, brokers=[])
    if v >= 1 and body.endpoint_type != BROKERS_ENDPOINT:
        return DescribeClusterResponse(version=v, error_code=UNSUPPORTED_VERSION,
                                       error_message="this simulated broker describes brokers only",
                                       cluster_id=state.cluster_id, brokers=[])
    live = state.unfenced_brokers()
    listed = [(b, False) for b in live]
    if v >= 2 and body.include_fenced_brokers:
        listed += [(b, True) for b in state.fenced_brokers()]
    brokers = [DescribeClusterResponse.DescribeClusterBroker(
        version=v, broker_id=b.broker_id, host=state.host, port=b.port, rack=b.rack, is_fenced=fenced)
        for b, fenced in sorted(listed, key=lambda x: x[0].broker_id)]
    return DescribeClusterResponse(version=v, throttle_time_ms=0, error_code=0, error_message=None,
                                   cluster_id=state.cluster_id, controller_id=_controller(live), brokers=brokers)


def describe_log_dirs(state: SimulatedCluster, broker_id: int, request: Request) -> ApiMessage:
    v = request.api_version
    fault = state.has_fault("log_dirs_error", broker_id)
    if fault is not None:
        # v3+ carries a top-level error; older versions can only answer with no log dirs.
        return DescribeLogDirsResponse(version=v, throttle_time_ms=0, error_code=fault.error_code, results=[])
    # The result of each log dir is made once per broker and version and its readings updated in place: making
    # them anew was a third of a simulator's CPU, which a benchmark's simulators take from the job's cores. Safe
    # because a response is encoded as soon as it is made, on the simulator's one event loop.
    made = state.wire_results.setdefault((broker_id, v), {})
    results = []
    for r in state.log_dir_readings(broker_id):
        result = made.get(r.path)
        if result is None:
            result = made[r.path] = DescribeLogDirsResponse.DescribeLogDirsResult(
                version=v, error_code=r.error_code, log_dir=r.path, topics=_hosted(v, r.topics),
                total_bytes=r.total_bytes, usable_bytes=r.usable_bytes)
        else:
            result.error_code, result.total_bytes, result.usable_bytes = r.error_code, r.total_bytes, r.usable_bytes
            if bool(result.topics) != bool(r.topics):  # an offline dir lists none, as Kafka's
                result.topics = _hosted(v, r.topics)
        _size_partitions(result, r)
        results.append(result)
    return DescribeLogDirsResponse(version=v, throttle_time_ms=0, error_code=0, results=results)


def _hosted(v: int, topics: tuple[tuple[str, int], ...]) -> list[Any]:
    """The DescribeLogDirs topics of a log dir hosting `topics` ((name, partitions)), sizes set by _size_partitions."""
    topic, partition = (DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic,
                        DescribeLogDirsResponse.DescribeLogDirsResult.DescribeLogDirsTopic.DescribeLogDirsPartition)
    return [topic(version=v, name=name, partitions=[
        partition(version=v, partition_index=i, partition_size=0, offset_lag=0, is_future_key=False)
        for i in range(n)]) for name, n in topics]


def _size_partitions(result: Any, reading: Any) -> None:
    """Each hosted partition an equal share of the dir's used bytes (0 when the dir reports no byte counts)."""
    partitions = [p for t in result.topics for p in t.partitions]
    if not partitions:
        return
    used = reading.total_bytes - reading.usable_bytes if reading.total_bytes >= 0 else 0
    for p in partitions:
        p.partition_size = max(int(used) // len(partitions), 0)
