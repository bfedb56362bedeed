"""Observe one Kafka cluster: DescribeCluster, then DescribeLogDirs on every active broker at once -> VolumeSnapshot."""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable

import kafka.errors as Errors
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import DescribeClusterRequest, DescribeLogDirsRequest
from kafka.protocol.metadata import MetadataRequest

from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.kafka.admin import AdminConnection
from quota_pipeline.kafka.refusal import ClusterRefused
from quota_pipeline.core.config import Config
from quota_pipeline.core.model import TOP_PARTITIONS, PartitionSize, Status, Volume, VolumeSnapshot

log = logging.getLogger(__name__)

KIP_827_VERSION = 4  # DescribeLogDirs v4 (Kafka 3.3) added TotalBytes and UsableBytes
DEFAULT_REQUEST_TIMEOUT_MS = 30000
INTERVAL_SHARE = 0.8  # a poll must end well before the next one is due
MIN_TIMEOUT_MS = 100
# DescribeCluster gets this share of the poll's timeout per broker asked: a broker that hangs (stopped, a hung
# network thread) must leave time to ask another one and for every broker's DescribeLogDirs.
DESCRIBE_CLUSTER_SHARE = 3
_TIMEOUTS = (Errors.KafkaTimeoutError, Errors.RequestTimedOutError)
BY_DIR = attrgetter("broker_id", "log_dir")


def call_timeout_ms(config: Config) -> int:
    """Per-poll timeout: the configured request timeout, capped at 80% of the check interval."""
    configured = DEFAULT_REQUEST_TIMEOUT_MS
    try:
        configured = int(config.admin.get("request.timeout.ms", configured))
    except ValueError:
        pass
    interval_ms = config.check_interval.total_seconds() * 1000
    if interval_ms > 0:
        configured = min(configured, int(interval_ms * INTERVAL_SHARE))
    return max(MIN_TIMEOUT_MS, configured)


class _Outcome(Exception):
    """A poll that ends early with a non-SUCCESS status; caught inside poll()."""

    def __init__(self, status: Status, message: str, brokers: tuple[int, ...] = (),
                 fenced: tuple[int, ...] = (), reset: bool = False):
        super().__init__(message)
        self.status, self.message, self.brokers, self.fenced, self.reset = status, message, brokers, fenced, reset


@dataclass
class _BrokerProblems:
    unsupported: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)

    def outcome(self) -> tuple[Status, str | None]:
        """The poll's status and message: SUCCESS without a problem, else the gravest kind with its lines."""
        if self.unsupported:
            return Status.UNSUPPORTED_BROKER, "; ".join(self.unsupported)
        if self.errors:
            return Status.DESCRIBE_LOG_DIRS_ERROR, "; ".join(self.errors + self.timeouts)
        if self.timeouts:
            return Status.TIMEOUT, "; ".join(self.timeouts)
        return Status.SUCCESS, None


class Observer(AdminConnection):
    """Holds one admin client across polls; `poll()` never raises, every outcome is a snapshot."""

    def __init__(self, config: Config, client_factory: Callable[..., KafkaAdminClient] | None = None,
                 clock: Clock = SYSTEM):
        super().__init__(config.admin, call_timeout_ms(config), client_factory)
        self.config = config
        self.clock = clock
        self._cluster_id: str | None = None

    @property
    def cluster_id(self) -> str:
        """The last cluster id seen; before any, the configured cluster name or the bootstrap list."""
        return self._cluster_id or self.config.cluster_name or self.config.bootstrap_servers or "unknown"

    def poll(self) -> VolumeSnapshot:
        started = self.clock.now()
        deadline = self.clock.monotonic() + self.timeout_ms / 1000
        try:
            client = self._connect(deadline)
            return client._manager.run(self._poll, client, started, deadline)
        except _Outcome as out:
            if out.reset:
                self.close()
            return self._snapshot(started, out.status, message=out.message, brokers=out.brokers, fenced=out.fenced)
        except Exception as exc:  # never raise out of poll: an unexpected failure is a status too
            log.warning("observation failed: %r", exc, exc_info=log.isEnabledFor(logging.DEBUG))
            self.close()
            status = Status.TIMEOUT if isinstance(exc, _TIMEOUTS) else Status.ERROR
            return self._snapshot(started, status, message=f"{type(exc).__name__}: {exc}")

    # ---- internals ----------------------------------------------------------------------------

    def _snapshot(self, started: Any, status: Status, message: str | None = None, brokers: tuple[int, ...] = (),
                  fenced: tuple[int, ...] = (), volumes: tuple[Volume, ...] = ()) -> VolumeSnapshot:
        return VolumeSnapshot(cluster_id=self.cluster_id, observed_at=started, status=status,
                              brokers=brokers, fenced_brokers=fenced, volumes=volumes, message=message)

    def _connect(self, deadline: float) -> KafkaAdminClient:
        if self._client is not None:
            return self._client
        remaining = max(MIN_TIMEOUT_MS, int((deadline - self.clock.monotonic()) * 1000))
        try:
            self._client = self._bootstrap(remaining)
        except ClusterRefused as exc:
            raise _Outcome(Status.DESCRIBE_CLUSTER_ERROR, str(exc)) from None
        except Errors.KafkaTimeoutError as exc:
            raise _Outcome(Status.DESCRIBE_CLUSTER_ERROR,
                           f"cannot reach any of {self.config.bootstrap_servers} within {remaining} ms ({exc}); "
                           "check kafka.admin.bootstrap.servers, the network, and the security settings") from None
        except Errors.KafkaConfigurationError as exc:
            raise _Outcome(Status.ERROR, f"admin client configuration rejected: {exc}") from None
        return self._client

    async def _poll(self, client: KafkaAdminClient, started: Any, deadline: float) -> VolumeSnapshot:
        manager = client._manager

        def remaining_ms() -> int:
            left = int((deadline - self.clock.monotonic()) * 1000)
            if left <= 0:
                raise Errors.KafkaTimeoutError(f"poll exceeded {self.timeout_ms} ms")
            return left

        brokers, fenced = await self._describe_cluster(manager, remaining_ms)
        if any(manager.cluster.broker_metadata(b) is None for b in brokers):
            # A broker DescribeCluster knows but our metadata does not (just joined): refresh once.
            try:
                await manager.wait_for(manager.call_soon(manager.cluster.refresh_metadata), remaining_ms())
            except Errors.KafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)

        # Send every request before awaiting any: the brokers answer in parallel, one round trip in all.
        # topics=None: every partition's size, of which each log dir keeps its largest (what fills it).
        futures = {}
        for b in brokers:
            try:
                futures[b] = manager.send(DescribeLogDirsRequest(topics=None), node_id=b,
                                          request_timeout_ms=remaining_ms())
            except Errors.KafkaError as exc:
                futures[b] = exc
        problems = _BrokerProblems()
        volumes: list[Volume] = []
        for b, fut in futures.items():
            try:
                if isinstance(fut, Exception):
                    raise fut
                if fut.is_done:  # answered while we waited for a slower broker: no time budget needed
                    if fut.exception is not None:
                        raise fut.exception
                    response = fut.value
                else:
                    response = await manager.wait_for(fut, remaining_ms())
            except _TIMEOUTS as exc:
                problems.timeouts.append(f"broker {b}: no answer within {self.timeout_ms} ms ({type(exc).__name__})")
                continue
            except Errors.KafkaProtocolError as exc:
                raise _Outcome(Status.ERROR, f"broker {b}: malformed DescribeLogDirs response ({exc})",
                               brokers, fenced, reset=True) from None
            except Errors.KafkaError as exc:
                problems.errors.append(f"broker {b}: {type(exc).__name__}: {exc}")
                continue
            volumes.extend(_volumes(b, response, problems))

        status, message = problems.outcome()
        # A partial view keeps the volumes of the brokers that answered: a full disk among them stops at once, and
        # the brokers that did not answer (no volume listed) count as missing, so no release follows from it.
        return self._snapshot(started, status, message=message, brokers=brokers, fenced=fenced,
                              volumes=tuple(sorted(volumes, key=BY_DIR)))

    async def _describe_cluster(self, manager: Any, remaining_ms: Callable[[], int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(active brokers, fenced brokers); fenced ones only from brokers with DescribeCluster v2 (KIP-1073)."""
        tried: dict[Any, str] = {}  # node -> why it failed, in this poll
        while True:
            node = _pick_node(manager, tried)
            if node is None:
                raise _Outcome(Status.DESCRIBE_CLUSTER_ERROR, "DescribeCluster failed on every broker: "
                               + "; ".join(f"broker {n}: {e}" for n, e in tried.items()), reset=True)
            request = DescribeClusterRequest(include_cluster_authorized_operations=False, include_fenced_brokers=True)
            share = 0
            try:
                share = min(remaining_ms(), max(MIN_TIMEOUT_MS, self.timeout_ms // DESCRIBE_CLUSTER_SHARE))
                response = await manager.wait_for(manager.send(request, node_id=node, request_timeout_ms=share), share)
                break
            except (Errors.KafkaConnectionError, Errors.NodeNotReadyError) as exc:
                # That broker is down: ask another one, as the Java admin client does.
                tried[node] = f"{type(exc).__name__}: {exc}"
            except Errors.IncompatibleBrokerVersion:
                return await self._metadata_brokers(manager, remaining_ms)  # Kafka < 2.8 has no DescribeCluster
            except _TIMEOUTS as exc:
                # A hung broker, not a poll that hangs: another one is asked with the time left, if any.
                tried[node] = f"no answer within {share or self.timeout_ms} ms ({type(exc).__name__})"
                if not share or _pick_node(manager, tried) is None:
                    raise _Outcome(Status.TIMEOUT, "DescribeCluster: " + "; ".join(
                        f"broker {n}: {e}" for n, e in tried.items())) from None
            except Errors.KafkaProtocolError as exc:
                raise _Outcome(Status.ERROR, f"DescribeCluster: malformed response ({exc})", reset=True) from None
            except Errors.KafkaError as exc:
                raise _Outcome(Status.DESCRIBE_CLUSTER_ERROR, f"DescribeCluster failed: {type(exc).__name__}: {exc}",
                               reset=True) from None
        if response.error_code:
            error = Errors.for_code(response.error_code)
            detail = f": {response.error_message}" if response.error_message else ""
            raise _Outcome(Status.DESCRIBE_CLUSTER_ERROR, f"DescribeCluster returned {error.message}{detail}")
        self._cluster_id = response.cluster_id or self._cluster_id
        active = tuple(sorted(b.broker_id for b in response.brokers if not b.is_fenced))
        fenced = tuple(sorted(b.broker_id for b in response.brokers if b.is_fenced))
        return active, fenced

    async def _metadata_brokers(self, manager: Any, remaining_ms: Callable[[], int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        response = await manager.wait_for(manager.send(MetadataRequest(topics=[]), request_timeout_ms=remaining_ms()),
                                          remaining_ms())
        self._cluster_id = getattr(response, "cluster_id", None) or self._cluster_id
        return tuple(sorted(b.node_id for b in response.brokers)), ()


def _pick_node(manager: Any, tried: dict[Any, str]) -> Any:
    """The least loaded broker not tried yet in this poll, else any untried broker not in reconnect backoff."""
    node = manager.least_loaded_node()
    if node is not None and node not in tried:
        return node
    for broker in manager.cluster.brokers():
        if broker.node_id not in tried and manager.connection_delay(broker.node_id) == 0:
            return broker.node_id
    return None


def _volumes(broker_id: int, response: Any, problems: _BrokerProblems) -> list[Volume]:
    version = response.API_VERSION
    if response.error_code:
        problems.errors.append(f"broker {broker_id}: DescribeLogDirs returned {Errors.for_code(response.error_code).message}")
        return []
    if version is not None and version < KIP_827_VERSION:
        return _unsupported(broker_id, f"it answers DescribeLogDirs v{version}, without volume byte counts (KIP-827 "
                                       "needs v4)", problems)
    volumes = []
    for r in response.results:
        if r.error_code:
            volumes.append(Volume(broker_id, r.log_dir, None, None, error=Errors.for_code(r.error_code).message))
        elif r.total_bytes < 0 or r.usable_bytes < 0:
            return _unsupported(broker_id, "it reports no volume byte counts (total/usable bytes -1)", problems)
        elif r.topics:
            volumes.append(Volume(broker_id, r.log_dir, int(r.total_bytes), int(r.usable_bytes),
                                  top_partitions=_largest_partitions(r), topics=_topics(r)))
        else:  # a dir holding no partition: most of a fleet's spare dirs, built without the helpers' calls
            volumes.append(Volume(broker_id, r.log_dir, int(r.total_bytes), int(r.usable_bytes), None, (), ()))
    return volumes


def _unsupported(broker_id: int, why: str, problems: _BrokerProblems) -> list[Volume]:
    """No volumes from a broker that cannot report them, and the problem that says so."""
    problems.unsupported.append(f"broker {broker_id}: {why}; Kafka >= 3.3 is required on every broker, upgrade "
                                f"broker {broker_id}")
    return []


def _topics(result: Any) -> tuple[str, ...]:
    """The sorted distinct topics with a replica on the log dir: every partition, future replicas included (a
    replica being moved onto the dir writes to it), so that a stop at this dir refuses all that can fill it."""
    return tuple(sorted({t.name for t in (result.topics or []) if t.partitions}))


def _largest_partitions(result: Any) -> tuple[PartitionSize, ...]:
    """The log dir's largest partitions, biggest first: the record names what fills a disk, not every partition."""
    sizes = ((p.partition_size, t.name, p.partition_index) for t in (result.topics or [])
             for p in t.partitions if not p.is_future_key)
    return tuple(PartitionSize(topic, partition, int(size))
                 for size, topic, partition in heapq.nlargest(TOP_PARTITIONS, sizes, key=lambda s: (s[0], s[1], -s[2])))


def poll_once(cluster_config: Config) -> VolumeSnapshot:
    """One observation with a fresh client (a long-running caller keeps an Observer instead)."""
    with Observer(cluster_config) as observer:
        return observer.poll()
