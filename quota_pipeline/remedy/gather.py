"""A ClusterView read through the Admin API: racks, log dirs (twice, `sample` seconds apart, for growth rates),
replica assignments, reassignments in progress, whether the brokers know cordoned.log.dirs."""
from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from quota_pipeline.core.config import Config
from quota_pipeline.core.exemption import StopExemption
from quota_pipeline.remedy.inputs import ClusterView, Dir, Replica, log_dir_replicas, with_growth

CORDON_KEY = "cordoned.log.dirs"  # KIP-1066 (Kafka 4.3): a broker places no new replica on these dirs


class ReadPort(Protocol):
    def cluster(self) -> tuple[str, dict[int, str | None]]: ...
    def assignments(self) -> dict[tuple[str, int], tuple[int, ...]]: ...
    def log_dirs(self, brokers: list[int]) -> dict[int, list[dict[str, Any]]]: ...
    def reassignments(self) -> dict[tuple[str, int], dict[str, list[int]]]: ...
    def configs(self, resources: list[tuple[str, str]], keys: list[str]) -> dict: ...


def read_dirs(admin: ReadPort, brokers: list[int]) -> tuple[list[Dir], list[Replica]]:
    dirs: list[Dir] = []
    replicas: list[Replica] = []
    for broker, results in sorted(admin.log_dirs(brokers).items()):
        d, r = log_dir_replicas(broker, results)
        dirs += d
        replicas += r
    return dirs, replicas


def read_view(admin: ReadPort, conf: Config, sample_seconds: float = 0.0,
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> ClusterView:
    """One reading of everything the plan depends on; with `sample_seconds` > 0 the log dirs are read twice and
    each dir and replica gets the rate it grew at in between."""
    cluster_id, racks = admin.cluster()
    brokers = sorted(racks)
    started = clock()
    dirs, replicas = read_dirs(admin, brokers)
    if sample_seconds > 0:
        sleep(sample_seconds)
        dirs, replicas = with_growth((dirs, replicas), read_dirs(admin, brokers), clock() - started)
    cordon = admin.configs([("broker", str(b)) for b in brokers], [CORDON_KEY]) if brokers else {}
    supported = bool(cordon) and all(CORDON_KEY in found for found in cordon.values())
    cordoned = {int(name): tuple(p for p in (found.get(CORDON_KEY, (None, ""))[0] or "").split(",") if p)
                for (_, name), found in cordon.items()}
    return ClusterView(conf.cluster_name or cluster_id, racks, tuple(dirs), tuple(replicas), admin.assignments(),
                       frozenset(admin.reassignments()),
                       StopExemption.of(conf).held, supported, cordoned)
