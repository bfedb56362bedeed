"""Real 1-node clusters whose broker loads the project's plugins (the quota callback, the stop authorizer) from the
jar, and what the tests read off such a broker: its server log, an MBean's attribute."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from harness.kafka import ClusterSpec, RealKafka, start_cluster
from harness.kafka_process import FAST_START_JVM, TmpfsUnavailable

CLUSTER = "callback-test"
CALLBACK = "io.quotapipeline.callback.PipelineQuotaCallback"
MONITORABLE = "io.quotapipeline.callback.MonitorablePipelineQuotaCallback"


@contextmanager
def callback_broker(jar: Path, callback_class: str, settings: dict[str, str], jmx_port: int | None = None,
                    tmpfs_mb: int | None = None, nodes: int = 1, log_dirs: int | None = None) -> Iterator[RealKafka]:
    """A cluster (1 node unless `nodes`) whose brokers load the callback from `jar` (CLASSPATH), always stopped
    afterwards; with `tmpfs_mb`, node 1's last log dir is a tmpfs of that size (root only), a second one unless
    `log_dirs` says how many each node has."""
    overrides = {"client.quota.callback.class": callback_class, "quota.pipeline.cluster.name": CLUSTER, **settings}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CLASSPATH", str(jar))  # kafka-run-class.sh puts it before Kafka's own libs
        if jmx_port is not None:
            env.setenv("JMX_PORT", str(jmx_port))
        try:
            cluster = start_cluster(ClusterSpec(nodes=nodes, log_dirs=log_dirs or (2 if tmpfs_mb else 1),
                                                tmpfs_mb=tmpfs_mb, jvm_opts=FAST_START_JVM, overrides=overrides))
        except TmpfsUnavailable as exc:
            pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


def server_log(cluster: RealKafka) -> str:
    return (cluster.nodes[1].logs / "server.log").read_text(errors="replace")


def jmx_value(cluster: RealKafka, port: int, name: str, attribute: str) -> float:
    """One attribute of one MBean of the broker, read with Kafka's own JmxTool."""
    env = {k: v for k, v in os.environ.items() if k not in ("JMX_PORT", "CLASSPATH")}
    env.update(KAFKA_HEAP_OPTS="-Xmx64m", LOG_DIR=str(cluster.root / "jmxtool-logs"),
               KAFKA_JVM_PERFORMANCE_OPTS=FAST_START_JVM)
    done = subprocess.run([str(cluster.home / "bin" / "kafka-run-class.sh"), "org.apache.kafka.tools.JmxTool",
                           "--jmx-url", f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi",
                           "--object-name", name, "--attributes", attribute, "--one-time", "true",
                           "--report-format", "properties"], env=env, capture_output=True, text=True, timeout=60)
    prefix = f"{name}:{attribute}="
    for line in done.stdout.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    raise AssertionError(f"JmxTool did not report {name}:{attribute}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
