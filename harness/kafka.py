"""Real Apache Kafka (KRaft) clusters for tests and benchmarks: nodes from KAFKA_HOME on free loopback ports."""
from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from harness import kafka_config as rc
from harness.kafka_client import wait_for
from harness.ports import kafka_range
from harness.kafka_process import NodeProcess, PortTaken, format_storage, mount_tmpfs, unmount, wait_metadata
from harness.kafka_tls import BrokerTls, make_broker_tls

ENABLE_HINT = "set KAFKA_HOME to an Apache Kafka >= 3.3 distribution (4.0+ for fenced brokers)"
SCRAM_USER = "quota-test"
SCRAM_PASSWORD = "quota-test-secret"


class KafkaUnavailable(RuntimeError):
    """No usable Kafka distribution or environment (tests skip with this message)."""


def kafka_home() -> Path:
    """KAFKA_HOME as a checked path, or KafkaUnavailable saying how to set it."""
    value = os.environ.get("KAFKA_HOME")
    if not value:
        raise KafkaUnavailable(ENABLE_HINT)
    home = Path(value).resolve()
    if not (home / "bin" / "kafka-server-start.sh").is_file():
        raise KafkaUnavailable(f"KAFKA_HOME={value} has no bin/kafka-server-start.sh; {ENABLE_HINT}")
    if kafka_version(home) < (3, 3):
        raise KafkaUnavailable(f"KAFKA_HOME={value} is Kafka {kafka_version(home)}; {ENABLE_HINT}")
    return home


def kafka_version(home: Path) -> tuple[int, int]:
    """(major, minor) from the name of libs/kafka-clients-X.Y.Z.jar, (0, 0) when it is not there."""
    for jar in (home / "libs").glob("kafka-clients-*.jar"):
        found = re.match(r"kafka-clients-(\d+)\.(\d+)", jar.name)
        if found:
            return int(found.group(1)), int(found.group(2))
    return (0, 0)


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago (all held open until all are chosen).

    Taken below the kernel's ephemeral range: a port from that range can be given to any client's outgoing
    connection (other tests' Kafka clients, Spark) between our choice and the node's bind; these cannot."""
    import random
    ports = kafka_range()
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.choice(ports)))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def hold_ports(ports: list[int]) -> list[socket.socket]:
    """Bind (without listening) `ports` so no other process takes them while their node is stopped."""
    held = []
    for port in ports:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the node's own bind (also SO_REUSEADDR) still works
        try:
            s.bind(("127.0.0.1", port))
            held.append(s)
        except OSError:
            s.close()
    return held


def ready_timeout(seconds: float) -> float:
    """`seconds` stretched by the machine's load: a JVM starts several times slower when the cores are busy."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


# In an override's value: the node's own PLAINTEXT listener (host:port), chosen when the cluster starts; e.g. a plugin
# that reads a topic on the broker that loads it.
SELF_PLAINTEXT = "{self.plaintext}"


@dataclass(frozen=True)
class ClusterSpec:
    """What to start: node count, log dirs per node, optional tmpfs log dirs, JVM heap, overrides."""

    nodes: int = 1
    log_dirs: int = 2
    tmpfs_mb: int | None = None  # node 1's last log dir is a tmpfs of this size (root only)
    tmpfs_nodes: int = 1  # how many nodes (1..tmpfs_nodes) get tmpfs log dirs
    tmpfs_dirs: int = 1  # how many of each such node's last log dirs are a tmpfs of tmpfs_mb (1..log_dirs)
    heap: str = "256m"
    jvm_opts: str | None = None  # KAFKA_JVM_PERFORMANCE_OPTS; None keeps Kafka's (G1, C2), as benchmarks need
    overrides: Mapping[str, str] = field(default_factory=dict)
    ready_timeout: float = 120.0
    authorizer: bool = False  # StandardAuthorizer, super user only on PLAINTEXT (kafka_config.authorizer_properties)


@dataclass
class RealKafka:
    """A running cluster: bootstrap per listener, node ids, log dirs per node, CA file, SCRAM user, node control."""

    home: Path
    spec: ClusterSpec
    root: Path
    tls: BrokerTls
    nodes: dict[int, NodeProcess]
    scram_user: str = SCRAM_USER
    scram_password: str = SCRAM_PASSWORD
    mounts: list[Path] = field(default_factory=list)
    held: dict[int, list[socket.socket]] = field(default_factory=dict)  # ports of stopped nodes, kept from others

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    @property
    def log_dirs(self) -> dict[int, tuple[str, ...]]:
        return {i: tuple(n.layout.log_dirs) for i, n in sorted(self.nodes.items())}

    @property
    def ca_file(self) -> Path:
        return self.tls.ca_file

    @property
    def version(self) -> tuple[int, int]:
        return kafka_version(self.home)

    def bootstrap(self, listener: str = rc.PLAINTEXT, node_ids: list[int] | None = None) -> str:
        """host:port list of `listener` on the given (default: all) nodes."""
        return ",".join(f"127.0.0.1:{self.nodes[i].layout.ports[listener]}" for i in node_ids or self.node_ids)

    def client_config(self, listener: str = rc.PLAINTEXT, password: str | None = None) -> dict[str, Any]:
        """confluent-kafka (librdkafka) settings for `listener`; `password` replaces the SCRAM user's password."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": listener}
        if listener == rc.SASL:
            conf.update({"sasl.mechanism": rc.SCRAM_MECHANISM, "sasl.username": self.scram_user,
                         "sasl.password": self.scram_password if password is None else password})
        elif listener == rc.SSL:
            conf["ssl.ca.location"] = str(self.ca_file)
        return conf

    def admin(self, **settings: Any):
        """A kafka-python KafkaAdminClient on the PLAINTEXT listener (the caller closes it)."""
        from kafka.admin import KafkaAdminClient
        return KafkaAdminClient(bootstrap_servers=self.bootstrap(), request_timeout_ms=20000, **settings)

    def stop_node(self, node_id: int) -> None:
        """Clean stop (SIGTERM, controlled shutdown): the node stays registered and is reported fenced."""
        self.nodes[node_id].stop(clean=True)
        self.held[node_id] = hold_ports(list(self.nodes[node_id].layout.ports.values()))

    def start_node(self, node_id: int) -> None:
        """Start a stopped node again and wait until it answers a metadata request listing itself."""
        node = self.nodes[node_id]
        for held in self.held.pop(node_id, []):
            held.close()
        node.start()
        node.wait_ready(self.bootstrap(node_ids=[node_id]), ready_timeout(self.spec.ready_timeout))

    def stop(self) -> None:
        """Kill every node's process group, unmount tmpfs log dirs, delete the data (idempotent)."""
        for node in self.nodes.values():
            node.stop(clean=False)
        for held in (s for sockets in self.held.values() for s in sockets):
            held.close()
        self.held.clear()
        for mount in self.mounts:
            unmount(mount)
        self.mounts.clear()
        shutil.rmtree(self.root, ignore_errors=True)
        atexit.unregister(self.stop)

    def create_scram_user(self, user: str | None = None, password: str | None = None) -> None:
        """Create a SCRAM-SHA-512 user (default: the test user) over PLAINTEXT and wait until it can log in on
        the SASL listener."""
        from kafka.admin import UserScramCredentialUpsertion
        user, password = user or self.scram_user, password or self.scram_password
        with_admin(self, lambda a: a.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "SCRAM-SHA-512", password)]))
        conf = {**self.client_config(rc.SASL), "sasl.username": user, "sasl.password": password}
        wait_metadata(conf, self.node_ids[0], 30.0)


def with_admin(cluster: RealKafka, call: Callable[[Any], Any]) -> Any:
    """Run `call` with a fresh admin client of `cluster` and close it."""
    admin = cluster.admin()
    try:
        return call(admin)
    finally:
        admin.close()


def _owner_alive(root: Path) -> bool:
    try:
        os.kill(int((root / "owner.pid").read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def sweep_stale(parent: Path = Path(tempfile.gettempdir())) -> None:
    """Unmount and delete what a killed (SIGKILL) earlier run left behind; its JVMs died with it."""
    for root in parent.glob("realkafka-*"):
        if (root / "owner.pid").exists() and not _owner_alive(root):
            for line in Path("/proc/mounts").read_text().splitlines():
                mount_point = line.split()[1]
                if mount_point.startswith(f"{root}/"):
                    unmount(Path(mount_point))
            shutil.rmtree(root, ignore_errors=True)


def _layouts(spec: ClusterSpec, root: Path) -> list[rc.NodeLayout]:
    ports = iter(free_ports(spec.nodes * len(rc.LISTENERS)))
    return [rc.NodeLayout(node_id=i, ports={name: next(ports) for name in rc.LISTENERS},
                          log_dirs=[str(root / f"node{i}" / f"data{d}") for d in range(1, spec.log_dirs + 1)],
                          metadata_dir=str(root / f"node{i}" / "metadata"))
            for i in range(1, spec.nodes + 1)]


def start_cluster(spec: ClusterSpec = ClusterSpec(), home: Path | None = None, attempts: int = 3) -> RealKafka:
    """Format and start every node, wait until each answers metadata, create the SCRAM user; stop all on failure.

    A node that dies because another process took one of its ports is not a failure of the test: the whole
    cluster is started again on new ports, up to `attempts` times."""
    for attempt in range(1, attempts + 1):
        try:
            return _start_once(spec, home or kafka_home())
        except PortTaken:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _start_once(spec: ClusterSpec, home: Path) -> RealKafka:
    sweep_stale()
    root = Path(tempfile.mkdtemp(prefix="realkafka-"))
    (root / "owner.pid").write_text(str(os.getpid()))
    tls = make_broker_tls(root)
    layouts = _layouts(spec, root)
    voters = rc.quorum_voters(layouts)
    cluster = RealKafka(home=home, spec=spec, root=root, tls=tls, nodes={})
    atexit.register(cluster.stop)
    try:
        for layout in layouts:
            for d in (*layout.log_dirs, layout.metadata_dir):
                Path(d).mkdir(parents=True)
        for layout in layouts[:spec.tmpfs_nodes] if spec.tmpfs_mb else []:
            for tmpfs_dir in map(Path, layout.log_dirs[len(layout.log_dirs) - spec.tmpfs_dirs:]):
                mount_tmpfs(tmpfs_dir, spec.tmpfs_mb)
                cluster.mounts.append(tmpfs_dir)
        for layout in layouts:
            # A callback keeps its last decision in its node's first log dir by default (quota.pipeline.state.dir):
            # never one of another test's clusters.
            overrides = {**(rc.authorizer_properties() if spec.authorizer else {}), **spec.overrides}
            own = f"127.0.0.1:{layout.ports[rc.PLAINTEXT]}"
            overrides = {k: v.replace(SELF_PLAINTEXT, own) for k, v in overrides.items()}
            text = rc.server_properties(layout, voters, min(3, spec.nodes), tls.broker_properties(), overrides)
            cluster.nodes[layout.node_id] = NodeProcess(home, layout, root / f"node{layout.node_id}", text, spec.heap,
                                                         spec.jvm_opts)
        cluster_id = rc.random_cluster_id()
        with ThreadPoolExecutor(spec.nodes) as pool:
            list(pool.map(lambda n: format_storage(n, cluster_id), cluster.nodes.values()))
        for node in cluster.nodes.values():
            node.start()
        for node_id, node in cluster.nodes.items():
            node.wait_ready(cluster.bootstrap(node_ids=[node_id]), ready_timeout(spec.ready_timeout))
        if cluster.version >= (3, 5):  # SCRAM in KRaft mode needs 3.5 (KIP-900)
            cluster.create_scram_user()
        return cluster
    except BaseException:
        cluster.stop()
        raise


def partition_on(cluster: RealKafka, topic: str, log_dir: str) -> int:
    """A partition of `topic` whose replica lives on `log_dir` of node 1 (Kafka spreads them over the dirs)."""
    def placed() -> list[int]:
        [broker] = with_admin(cluster, lambda a: a.describe_log_dirs())
        return [p["partition_index"] for d in broker["log_dirs"] if d["log_dir"] == log_dir
                for t in d["topics"] if t["name"] == topic for p in t["partitions"]]
    return wait_for(placed, 20, f"a partition of {topic} is placed on {log_dir}")[0]
