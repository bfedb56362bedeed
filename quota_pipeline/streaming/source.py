"""Streaming source `kafka_volumes`: polls each cluster once per check interval, journals, emits Volume rows.

Offsets are ticks of each cluster's check interval (tick n = the interval starting at n x interval
since the epoch), keyed by the cluster's config name, so a restart from the same checkpoint with a
cluster added (polled at once) or removed (left out) continues the others. A micro-batch covering ticks
(start, end] polls each cluster once, for tick `end`: ticks missed while the job was down are not
invented. The clusters due are spread over at most `poll_tasks` input partitions (one per executor
core), and a partition polls all of its clusters at once in threads: every cluster of a tick is
observed at about the same moment, however many clusters share a core. A snapshot is journaled before
its rows are returned. Only a re-run reads the journal: the micro-batch Spark planned before this query started
(its end offsets are the last entry of the checkpoint's offsets log when the source is created, before the
query plans anything) returns the journaled snapshot of its ticks instead of polling again, exactly-once from
the source's side. Every other batch is new: it polls, and journals the poll under a token of its own
(journal/ownership.py), never taking a tick file it did not write as its observation. Rows: one per snapshot, its
volumes packed in one binary value (streaming/packed.py; none for a failed poll, which still reaches the state
machine). A worker keeps its connections to the clusters it polled, and after its polls connects to the rest of the
fleet's (`connect_later`), as Spark may hand it another task's clusters next.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from quota_pipeline.core import config as cfg
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.model import UTC, Status, VolumeSnapshot
from quota_pipeline.journal import ownership
from quota_pipeline.journal.store import Claimed, Journal
from quota_pipeline.streaming import checkpoint_files, packed, worker_lines

log = logging.getLogger("quota_pipeline")

REMOVED = "REMOVED"  # the status of a row that says a cluster left the fleet (never a poll's status)
ROW_SCHEMA = (
    "config_name string, tick long, cluster_id string, observed_at timestamp, status string, message string, "
    "brokers array<int>, fenced_brokers array<int>, volumes binary"
)


@dataclass(frozen=True)
class ObservedCluster:
    """One observed cluster as the source sees it: a stable name and its properties."""

    name: str
    props: dict = field(repr=False)  # secrets among them: never in a repr (a log line, a traceback's message)

    @property
    def config(self) -> cfg.Config:
        return cfg.parse(self.props, self.name)


def config_name(conf: cfg.Config) -> str:
    """Stable name of a configured cluster: cluster.name, else the properties file's stem."""
    from pathlib import Path

    return conf.cluster_name or Path(conf.path).stem


def tick_seconds(conf: cfg.Config) -> float:
    return conf.check_interval.total_seconds()


def current_tick(conf: cfg.Config, now: dt.datetime) -> int:
    return int(now.timestamp() // tick_seconds(conf))


def tick_time(conf: cfg.Config, tick: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(tick * tick_seconds(conf), UTC)


MAX_POLL_THREADS = 64  # per partition; each poll mostly waits on its cluster's brokers


@dataclass(frozen=True)
class TickPartition(InputPartition):
    """One cluster's tick to observe. `rerun`: the batch was planned before this query started, so the journal's
    snapshot of the tick (if any) is what was decided and perhaps published then. `token`: the driver's random
    token for this tick of this batch; a tick file is the batch's own only if it holds it."""

    config_name: str
    props_json: str = field(repr=False)  # as ObservedCluster.props
    tick: int
    token: str = ""
    rerun: bool = False


@dataclass(frozen=True)
class Removal:
    """A cluster in the checkpoint's offsets whose config is gone: one REMOVED row drops its state."""

    config_name: str
    cluster_id: str
    tick: int


@dataclass(frozen=True)
class PollPartition(InputPartition):
    """The clusters one task polls, concurrently, each for its own tick (and the fleet's removals, if any). `fleet`:
    the other tasks' clusters (config name, properties JSON), which the worker connects to once it is done."""

    ticks: tuple[TickPartition, ...]
    removals: tuple[Removal, ...] = ()
    fleet: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # properties, as ObservedCluster.props


def snapshot_rows(config_name: str, tick: int, snap: VolumeSnapshot) -> Iterator[tuple]:
    """The snapshot's one row (an iterator, as the source yields rows)."""
    observed = snap.observed_at.astimezone(UTC).replace(tzinfo=None)  # Spark reads naive as session TZ (UTC)
    yield (config_name, tick, snap.cluster_id, observed, snap.status.value, snap.message, list(snap.brokers),
           list(snap.fenced_brokers), packed.pack(snap.volumes) if snap.volumes else None)


_observers: dict[str, object] = {}  # per worker process: admin connections survive across ticks
_observers_lock = threading.Lock()
_connecting: threading.Thread | None = None  # the worker's background connection to the rest of the fleet


def connect_later(fleet: tuple[tuple[str, str], ...]) -> threading.Thread | None:
    """Connect this worker, in the background, to the clusters of `fleet` it has no connection to yet.

    Spark hands a task to any idle Python worker, so the poll tasks' worker processes trade places now and then,
    and a process polling clusters it never polled connects to each of them first (a bootstrap, a connection per
    broker): a poll stage twice as long, once per worker, at a random micro-batch. Connected after its own polls
    (each such cluster polled once, the snapshot discarded: not journaled, never decided), the worker finds its
    connections whichever half of the fleet it gets."""
    global _connecting
    observers = _observers
    missing = [(name, props) for name, props in fleet if name not in observers]
    if not missing or (_connecting is not None and _connecting.is_alive()):
        return None

    def connect() -> None:
        from quota_pipeline.kafka.observer import Observer

        for name, props in missing:
            if name in observers:
                continue
            try:
                observer = Observer(cfg.parse(json.loads(props), name))
                observer.poll()  # never raises: a cluster out of reach is connected to at its own poll
            except Exception:  # noqa: BLE001 - a config this worker cannot use: its own poll reports it
                continue
            with _observers_lock:
                kept = observers.setdefault(name, observer)
            if kept is not observer:
                observer.close()

    _connecting = threading.Thread(target=connect, name="connect-fleet", daemon=True)
    _connecting.start()
    return _connecting


def poll_or_replay(config_name: str, conf: cfg.Config, tick: int, token: str, rerun: bool = False) -> VolumeSnapshot:
    """The snapshot of `tick`: a re-run's from the journal when it holds one, else a new poll, journaled under
    `token` (a file already there is taken only when it holds `token`: a retried attempt of this very task)."""
    journal = Journal(conf.effective_journal_path)
    at = tick_time(conf, tick)
    if rerun:
        journaled = journal.read_valid(config_name, tick, at)
        if journaled is not None:
            return journaled
    claimed = journal.claim(config_name, tick, at, _poll(config_name, conf, journal), token)
    warn_foreign(config_name, tick, claimed)
    return claimed.snapshot


def _poll(config_name: str, conf: cfg.Config, journal: Journal) -> VolumeSnapshot:
    from quota_pipeline.kafka.observer import Observer

    with _observers_lock:
        observer = _observers.get(config_name)
        if observer is None:
            observer = _observers[config_name] = Observer(conf)
    snap = observer.poll()  # type: ignore[attr-defined]
    if snap.status is Status.SUCCESS:
        journal.remember_cluster_id(config_name, snap.cluster_id)
        return snap
    # A fresh worker that never reached the cluster cannot know its id; the journal does.
    known = journal.last_cluster_id(config_name)
    return replace(snap, cluster_id=known) if known else snap


def foreign_warning(config_name: str, tick: int, claimed: Claimed) -> str | None:
    """The one log line saying what the journal held in a tick's place that this job did not write, if anything."""
    found = []
    if claimed.set_aside:
        found.append(", ".join(f"tick file {ownership.shown(f)} (kept as {ownership.shown(a)})"
                               for f, a in claimed.set_aside[:3]) + (" ..." if len(claimed.set_aside) > 3 else ""))
    if claimed.listed_by_period_file:
        found.append("a period file that lists this open tick")
    if not found:
        return None
    return (f"{config_name}: tick {tick}: the journal held {' and '.join(found)} that this job did not write; not "
            f"used: the tick was polled and the poll journaled. Who else can write the journal?")


def warn_foreign(config_name: str, tick: int, claimed: Claimed) -> None:
    line = foreign_warning(config_name, tick, claimed)
    if line:
        log.warning(line)


class KafkaVolumesReader(DataSourceStreamReader):
    def __init__(self, clusters: list[ObservedCluster], clock: Clock = SYSTEM, poll_tasks: int = 2,
                 replanned: dict | None = None) -> None:
        """`replanned`: the end offsets of the last batch in the checkpoint's offsets log when the query started,
        the only batch Spark may run again from the log (None: no checkpoint, every batch is new)."""
        self.clusters = clusters
        self.clock = clock
        self.poll_tasks = max(1, poll_tasks)
        self.configs = {c.name: c.config for c in clusters}
        self.replanned = replanned

    def _now_ticks(self) -> dict[str, int]:
        now = self.clock.now()
        return {name: current_tick(conf, now) for name, conf in self.configs.items()}

    def initialOffset(self) -> dict:
        # One tick back, so the first micro-batch polls at once instead of a full interval later.
        return {name: tick - 1 for name, tick in self._now_ticks().items()}

    def latestOffset(self, start: dict, limit=None) -> dict:
        return self._now_ticks()

    def due(self, start: dict, end: dict) -> list[TickPartition]:
        """Each configured cluster with a new tick in (start, end]; a cluster new to the checkpoint has one at
        once, one no longer configured has none (the offsets of either come and go with the fleet)."""
        due = []
        for c in sorted(self.clusters, key=lambda c: c.name):
            to = end.get(c.name)
            since = start.get(c.name, -1 if to is None else to - 1)
            if to is not None and to > since:
                due.append(TickPartition(c.name, json.dumps(c.props), to))
        return due

    def removals(self, start: dict) -> list[Removal]:
        """Clusters of the previous run (in `start`) no longer configured, by the cluster id their journal
        remembers (the state's key); one never observed successfully has no state to drop."""
        journals = {c.effective_journal_path for c in self.configs.values()}
        out = []
        for name in sorted(set(start) - set(self.configs)):
            ids = {Journal(path).last_cluster_id(name) for path in journals} - {None}
            out.extend(Removal(name, cluster_id, int(start[name])) for cluster_id in sorted(ids))
        return out

    def is_rerun(self, end: dict) -> bool:
        """Whether (start, end] is the batch the checkpoint had planned before this query started. A new batch ends
        past it (Spark plans one only when some cluster's tick moved on), so it can never match."""
        return self.replanned is not None and end == self.replanned

    def partitions(self, start: dict, end: dict) -> list[PollPartition]:
        rerun = self.is_rerun(end)
        due = [replace(t, token=ownership.new_token(), rerun=rerun) for t in self.due(start, end)]
        removals = tuple(self.removals(start))
        # Round-robin over the names in order: a cluster keeps its partition while the fleet does not change, and
        # each partition gets about as many clusters to poll.
        n = min(len(due), self.poll_tasks)
        fleet = [(t.config_name, t.props_json) for t in due]
        parts = [PollPartition(tuple(due[i::n]), fleet=tuple(c for j, c in enumerate(fleet) if j % n != i))
                 for i in range(n)]
        if removals:
            parts = [replace(parts[0], removals=removals), *parts[1:]] if parts else [PollPartition((), removals)]
        return parts

    def read(self, partition: PollPartition) -> Iterator[tuple]:
        worker_lines.install()  # in the executor's Python worker: the job's warnings reach the driver's terminal

        def poll(tick: TickPartition) -> VolumeSnapshot:
            return poll_or_replay(tick.config_name, cfg.parse(json.loads(tick.props_json), tick.config_name),
                                  tick.tick, tick.token, tick.rerun)

        ticks = partition.ticks
        if len(ticks) <= 1:
            snaps = [poll(t) for t in ticks]  # no thread for one cluster (or none: only removals)
        else:
            with ThreadPoolExecutor(min(len(ticks), MAX_POLL_THREADS), thread_name_prefix="poll") as pool:
                snaps = list(pool.map(poll, ticks))
        for tick, snap in zip(ticks, snaps):
            yield from snapshot_rows(tick.config_name, tick.tick, snap)
        now = dt.datetime.now(UTC).replace(tzinfo=None)
        for r in partition.removals:
            yield (r.config_name, r.tick, r.cluster_id, now, REMOVED, "its config left the fleet", None, None, None)
        connect_later(partition.fleet)

    def commit(self, end: dict) -> None:
        pass  # the journal is the durable record; nothing to acknowledge upstream


class KafkaVolumesSource(DataSource):
    """`spark.dataSource.register(KafkaVolumesSource.of(configs))`, then `spark.readStream.format("kafka_volumes")`.

    The configuration (SASL passwords, the signing keys) reaches the driver's planning worker inside the registered
    class, which Spark keeps as a pickle and never prints. An option's value is printed: in the DataFrame's plan
    (explain, the plan every AnalysisException's message carries), masked only when its key or value happens to
    match spark.redaction.regex. The options carry no setting: `poll_tasks` and `checkpoint` only."""

    clusters: tuple[ObservedCluster, ...] = ()

    @classmethod
    def of(cls, configs: list[cfg.Config]) -> type["KafkaVolumesSource"]:
        """The source of `configs`: a class made here, so that cloudpickle pickles it (and the clusters) by value."""

        class Configured(cls):  # type: ignore[misc, valid-type]
            clusters = tuple(ObservedCluster(config_name(c), dict(c.raw)) for c in configs)

        return Configured

    @classmethod
    def name(cls) -> str:
        return "kafka_volumes"

    def schema(self) -> str:
        return ROW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        clusters = list(self.clusters)
        # Spark creates its sources before it plans or re-runs a batch: the log's last entry is the previous run's.
        checkpoint = self.options.get("checkpoint") or (
            checkpoint_files.query_dir(clusters[0].config.checkpoint_path) if clusters else None)
        return KafkaVolumesReader(clusters, poll_tasks=int(self.options.get("poll_tasks", "2")),
                                  replanned=checkpoint_files.last_planned(checkpoint) if checkpoint else None)
