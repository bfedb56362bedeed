"""The streaming job: kafka_volumes source -> per-cluster decision state -> compacted topic + metrics.

Restarts the query from its checkpoint after a failed micro-batch (a delivery failure fails the
batch on purpose: Spark re-runs it from the journal and the state as of the last committed batch,
so nothing is lost or reordered), and gives up when none has published for
quota.pipeline.run.give.up.after (streaming/restarts.py). SIGTERM/SIGINT let the running batch finish before
stopping.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import isodate

from quota_pipeline.core import config as cfg
from quota_pipeline.core import names as path_names
from quota_pipeline.core.display import first_line
from quota_pipeline.core.clock import SYSTEM, Clock
from quota_pipeline.core.model import format_time
from quota_pipeline.core.record import predictive_of
from quota_pipeline.dashboard.text import predictive as predictive_text
from quota_pipeline.core.settings import Settings
from quota_pipeline.streaming.metrics import Metrics
from quota_pipeline.streaming import checkpoint_files, s3a
from quota_pipeline.streaming import held as held_factors
from quota_pipeline.streaming.fleet import fleet_change
from quota_pipeline.streaming.restarts import GAVE_UP, GaveUp, Restarts
from quota_pipeline.streaming.processor import OUTPUT_SCHEMA, REMOVED, DecisionProcessor
from quota_pipeline.kafka.publisher import Publisher, ensure_topic
from quota_pipeline.journal.background import Maintenance, log_report
from quota_pipeline.journal.maintenance import ClusterJournal, period_problem
from quota_pipeline.journal.storage import path_problem as journal_path_problem
from quota_pipeline.streaming.source import KafkaVolumesSource, config_name
from quota_pipeline.streaming.stages import StageTime, completed_stages
from quota_pipeline.streaming.start_time import StartClock, jvm_started

log = logging.getLogger("quota_pipeline")


class JobConfigError(ValueError):
    """The set of configs cannot run as one job; the message says what to change."""


def check_runnable(configs: list[cfg.Config]) -> None:
    names = [config_name(c) for c in configs]
    problems = []
    for c, name in zip(configs, names):
        if c.check_interval.total_seconds() <= 0:
            problems.append(f"error: {c.path}: the storage check interval is 0, which disables the check; set "
                            f"{cfg.CHECK_INTERVAL_SECONDS} (seconds) or {cfg.CHECK_INTERVAL_ISO} (ISO-8601) to run")
        if period_problem(c):
            problems.append(period_problem(c))
        if journal_path_problem(c.effective_journal_path):
            problems.append(f"error: {c.path}: {journal_path_problem(c.effective_journal_path)}")
        if path_names.problem(name):
            problems.append(f"error: {c.path}: the cluster's journal name {path_names.problem(name)}; set "
                            f"{cfg.CLUSTER_NAME}")
        if names.count(name) > 1:
            problems.append(f"error: {c.path}: another config also names its cluster {name!r}; set "
                            f"{cfg.CLUSTER_NAME} to tell them apart")
    first = configs[0]
    for c in configs[1:]:
        if (c.output_topic, c.output_settings.get("bootstrap.servers"), c.checkpoint_path) != (
                first.output_topic, first.output_settings.get("bootstrap.servers"), first.checkpoint_path):
            problems.append(f"error: {c.path}: one job writes one topic with one checkpoint; its output topic, "
                            f"output cluster and checkpoint path must match {first.path}'s")
        if c.signing_keys != first.signing_keys:
            problems.append(f"error: {c.path}: one job signs its records with one key; set {cfg.SIGNING_KEYS} as in "
                            f"{first.path}")
    if checkpoint_files.stateful_operator(checkpoint_files.query_dir(first.checkpoint_path)) == \
            checkpoint_files.PANDAS_FORM:
        problems.append(f"error: {first.checkpoint_path}: the checkpoint was written by an earlier form of the job's "
                        "stateful step, which this job does not read; start from a fresh checkpoint (an empty "
                        f"{cfg.CHECKPOINT_PATH})")
    if problems:
        raise JobConfigError("\n".join(dict.fromkeys(problems)))


@dataclass
class StreamJob:
    configs: list[cfg.Config]
    master: str | None = None
    on_decisions: Callable[[list[Any]], None] | None = None
    metrics: Metrics = field(default_factory=Metrics)
    summary_every: float = 300.0
    clock: Clock = SYSTEM
    log_batches: bool = False  # one line per micro-batch: its decisions and where its time went
    # Each decision's packed volumes reach the driver for the per-log-dir gauges; without a metrics endpoint nobody
    # reads them, and bringing them to the driver took tens of ms a micro-batch at 50,000 log dirs.
    volume_gauges: bool = True
    spark_log: str | None = None  # where a JVM started here writes its output (None: this process's stdout/stderr)

    def __post_init__(self) -> None:
        check_runnable(self.configs)
        self.first = self.configs[0]
        self.settings = {config_name(c): Settings.of(c) for c in self.configs}
        self.output_keys = {config_name(c): c.cluster_name for c in self.configs}
        self.metrics.intervals = {config_name(c): c.check_interval.total_seconds() for c in self.configs}
        self.metrics.validities = {config_name(c): c.validity.total_seconds() for c in self.configs}
        self._stop = threading.Event()
        self._query: Any = None
        self._publisher: Publisher | None = None
        self._last: dict[str, tuple[float, str]] = {}  # key -> (factor, source) last published
        self._resumed: set[str] = set()  # keys whose factor came from the checkpoint, not yet decided in this run
        self._counts: dict[str, int] = {}
        self._last_summary = self.clock.monotonic()
        self._batch_times: dict[int, str] = {}  # batch id -> what _batch measured, logged with Spark's progress
        self._last_stage = -1  # the newest Spark stage a logged micro-batch ran
        self._restarts = Restarts(self.first.run_give_up_after, self.clock)
        self._recorder = ThreadPoolExecutor(1, thread_name_prefix="metrics")  # one thread: batches in order
        self.start_clock = StartClock(self.first.checkpoint_path, self.metrics.start_seconds, log)

    # -- the query --------------------------------------------------------------------------------
    def spark_session(self, record_classes: bool = False) -> Any:
        """The job's SparkSession (`record_classes`: for `quota-pipeline prepare`, session.write_archive)."""
        from quota_pipeline.session import get_session

        cores = os.cpu_count() or 2
        # Under spark-submit (a gateway is already up) its --master decides; a default here would override it.
        submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
        master = self.master or (None if submitted else f"local[{cores},4]")
        conf = {
            # State partitions are fixed at the checkpoint's creation; one per core is plenty for
            # hundreds of clusters and keeps the per-batch task count (and latency) low.
            "spark.sql.shuffle.partitions": str(max(1, min(cores, len(self.configs)))),
            "spark.sql.streaming.pollingDelay": "100ms",
            "spark.ui.showConsoleProgress": "false",  # a progress bar per micro-batch drowns the log
            # The state store writes a small changelog per micro-batch instead of uploading a RocksDB snapshot.
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        }
        if checkpoint_files.is_local(self.first.checkpoint_path):
            # Without Hadoop's native library its local file system forks `chmod` for every checkpoint file it
            # creates and, through FileContext, `readlink` for every rename: at a 1 s interval that was a third of
            # each micro-batch. The FileSystem API renames in Java; a local rename is atomic either way.
            conf["spark.sql.streaming.checkpointFileManagerClass"] = (
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
        on_s3a = s3a.is_s3a(self.first.checkpoint_path)
        package = s3a.connector_package() if on_s3a and not submitted else None
        if package:  # under spark-submit, spark-submit.sh passed it to --packages: the JVM is up by now
            conf["spark.jars.packages"] = package
        spark = get_session("quota-pipeline-stream", master=master, conf=conf, record_classes=record_classes,
                            jvm_output=self.spark_log, keep_sigint=True)  # SIGINT: request_stop, as SIGTERM
        if on_s3a:
            log.info("checkpoint on %s: S3A to %s", self.first.checkpoint_path, s3a.describe(s3a.configure(spark)))
        return spark

    def decisions(self, spark: Any) -> Any:
        """The streaming DataFrame of decisions: the kafka_volumes source through the stateful step."""
        # The configs travel inside the registered class, never as an option: Spark prints options (source.py).
        spark.dataSource.register(KafkaVolumesSource.of(self.configs))
        # One polling task per executor core: the cores poll side by side, each task its clusters all at once.
        # The source reads the query's checkpoint to tell a re-run batch (may read the journal) from a new one.
        checkpoint = checkpoint_files.query_dir(self.first.checkpoint_path)
        rows = (spark.readStream.format(KafkaVolumesSource.name())
                .option("poll_tasks", str(spark.sparkContext.defaultParallelism))
                .option("checkpoint", checkpoint).load())
        grouped = rows.groupBy("cluster_id")
        return grouped.transformWithState(
            statefulProcessor=DecisionProcessor(self.settings, self.output_keys, self.clock),
            outputStructType=OUTPUT_SCHEMA, outputMode="Append", timeMode="None")

    def start(self) -> Any:
        spark = self.spark_session()
        decisions = self.decisions(spark)
        self._publisher = self._publisher or Publisher(
            self.first.output_settings, self.first.output_topic, on_acknowledged=self.metrics.acknowledged,
            clock=self.clock, signing_key=self.first.signing_keys[0] if self.first.signing_keys else None)
        self._query = (decisions.writeStream.queryName("quota-pipeline")
                       .option("checkpointLocation", checkpoint_files.query_dir(self.first.checkpoint_path))
                       .foreachBatch(self._batch).start())
        return self._query

    def _batch(self, frame: Any, batch_id: int) -> None:
        started = self.clock.monotonic()
        rows = (frame if self.volume_gauges else frame.drop("volumes")).collect()
        collected = self.clock.monotonic()
        for r in rows:
            if r.status == REMOVED:
                log.info("%s: dropped the decision state of cluster %s: its config is no longer in the fleet "
                         "(its brokers keep the last decision until its valid_until, then apply their fallback)",
                         r.config_name, r.key)
        rows = sorted((r for r in rows if r.status != REMOVED), key=lambda r: (r.key, r.observed_at))
        # Publish first: the batch (and so the state and the offsets) only commits once Kafka has it all.
        assert self._publisher is not None
        self.metrics.awaiting(r.key for r in rows)
        self._publisher.publish((r.key, r.value) for r in rows)
        if self.log_batches:
            stages = completed_stages(frame.sparkSession, self._last_stage)
            self._last_stage = stages[-1].stage_id if stages else self._last_stage
            self._batch_times[batch_id] = describe_batch(rows, stages, collected - started,
                                                         self.clock.monotonic() - collected)
        self._restarts.published()
        if rows and not self.start_clock.done:
            self.start_clock.published(jvm_started(frame))
        # Off the micro-batch: a gauge per log dir is about 1 s per batch at 100,000 of them, and the trigger waits.
        self._recorder.submit(self.metrics.record, rows).add_done_callback(_log_failure)
        self._log(rows)
        if self.on_decisions:
            self.on_decisions(rows)
        self.metrics.batch_seconds.observe(self.clock.monotonic() - started)

    def _log(self, rows: list[Any]) -> None:
        changed = False
        for r in rows:
            self._counts[r.key] = self._counts.get(r.key, 0) + 1
            last = self._last.get(r.key)
            now = (r.throttle_factor, r.decision_source)
            kept = r.key in self._resumed and last == now
            self._resumed.discard(r.key)
            if last != now or kept:
                change = (f"{r.throttle_factor:.3f}" if last is None else
                          f"{last[0]:.3f} kept" if kept else f"{last[0]:.3f} -> {r.throttle_factor:.3f}")
                log.info("%s: throttle factor %s (%s) at %s: status %s, %d violating log dir(s), "
                         "%d/%d log dirs in force%s", r.key, change, r.decision_source, format_time(r.observed_at),
                         r.status, r.violations, r.active_log_dirs, r.cached_volumes, predictive_cause(r))
                changed = changed or last != now
                self._last[r.key] = now
        if changed:
            self._keep_factors()
        if self.clock.monotonic() - self._last_summary >= self.summary_every:
            self._last_summary = self.clock.monotonic()
            for key, (factor, source) in sorted(self._last.items()):
                log.info("summary %s: factor %.3f (%s), %d decisions published", key, factor, source,
                         self._counts.get(key, 0))

    # -- lifecycle --------------------------------------------------------------------------------
    def prepare_output(self) -> str:
        return ensure_topic(self.first.output_settings, self.first.output_topic)

    def resuming(self) -> bool:
        """Whether the checkpoint holds a committed micro-batch: this job ran against its output cluster before."""
        commits = checkpoint_files.join(checkpoint_files.query_dir(self.first.checkpoint_path), "commits")
        return any(name.isdigit() for name in checkpoint_files.names(commits))

    def start_output(self) -> str | None:
        """The output topic, made ready before the query starts (None: stopped while waiting for it; GaveUp when
        a resuming job waited longer than quota.pipeline.run.give.up.after)."""
        return output_ready(self.prepare_output, self.resuming(), self._stop, log.warning,
                            give_up_after=self.first.run_give_up_after, clock=self.clock)

    def request_stop(self) -> None:
        self._stop.set()

    def run(self, max_restarts: int | None = None) -> int:
        """Run until request_stop() (0); restart from the checkpoint after failures, with backoff; GAVE_UP when
        the query keeps failing with nothing published for quota.pipeline.run.give.up.after."""
        maintenance = Maintenance([ClusterJournal.of(c, config_name(c)) for c in self.configs],
                                  lambda report: (self.metrics.record_journal(report), log_report(report)))
        maintenance.start()  # off the decision path: a niced child process compacts and prunes the journal
        self._log_resumed()
        self._log_fleet_change()
        try:
            return self._run(max_restarts)
        except Exception as exc:  # noqa: BLE001
            if not self._stop.is_set() or "py4j" not in type(exc).__module__:
                raise
            # The signal reached the JVM too (a process-group kill): nothing is lost, the interrupted
            # micro-batch is re-run from the journal and the checkpoint on the next start.
            log.warning("Spark stopped before the running micro-batch finished; it is re-run on restart")
            return 0
        finally:
            maintenance.stop()
            self._recorder.submit(lambda: None).result(timeout=60)  # the last batches' metrics are in

    def _keep_factors(self) -> None:
        try:
            held_factors.write(checkpoint_files.query_dir(self.first.checkpoint_path), self._last)
        except Exception as exc:  # noqa: BLE001 - only a restart's log line depends on it
            log.warning("could not record the factors in force in the checkpoint: %s", first_line(exc))

    def _log_resumed(self) -> None:
        """On a restart, the factors in force as the checkpoint left them; the first decision of each says whether
        it changed (never `none -> ...`)."""
        if not self.resuming():
            return
        held = held_factors.read(checkpoint_files.query_dir(self.first.checkpoint_path))
        log.info("%s", held_factors.resumed_line(held))
        self._last = {**(held or {}), **self._last}
        self._resumed = set(held or {})

    def _log_fleet_change(self) -> None:
        change = fleet_change(checkpoint_files.query_dir(self.first.checkpoint_path), list(self.settings))
        if change is None:
            return
        for name in change.added:
            log.info("%s: new in the fleet since the checkpoint's last micro-batch; polled from the first one",
                     name)
        for name in change.removed:
            log.info("%s: no longer in the fleet (its config is gone); its decision state is dropped in the first "
                     "micro-batch, every other cluster's state is kept", name)

    def _run(self, max_restarts: int | None) -> int:
        restarts = 0
        self._restarts = Restarts(self.first.run_give_up_after, self.clock)  # the streak counts from here
        while not self._stop.is_set():
            error = self._run_query()
            if error is None:
                break
            restarts += 1
            if max_restarts is not None and restarts > max_restarts:
                log.error("stream failed %d times, giving up: %s", restarts, error)
                return 1
            wait = self._restarts.failed()
            if wait is None:
                log.error("%s", self._restarts.giving_up(error))
                self._drop_publisher()
                return GAVE_UP
            log.warning("micro-batch failed, restarting from the checkpoint in %.0fs: %s", wait, error)
            self._drop_publisher()
            self._stop.wait(wait)
            self._ensure_output()
        if self._publisher:
            self._publisher.close()
        return 0

    def _run_query(self) -> str | None:
        """Run the query until a stop is requested (None) or it fails (the failure's first line)."""
        from pyspark.errors import StreamingQueryException

        query = self.start()
        try:
            while not self._stop.is_set() and query.isActive:
                # Raises when a micro-batch failed (a delivery failure, a task error): a restart, not an exit.
                query.awaitTermination(0.1 if self.log_batches else 0.5)
                if self.log_batches:
                    self._log_progress(query.lastProgress)
        except StreamingQueryException as exc:
            return first_line(exc)
        if self._stop.is_set():
            self._graceful_stop(query)
            return None
        error = query.exception()
        return first_line(error) if error else "the query stopped"

    def _log_progress(self, progress: Any) -> None:
        """Spark's durations of a finished micro-batch with what _batch measured inside it, on one line."""
        if not progress or progress.get("batchId") not in self._batch_times:
            return
        d = progress.get("durationMs", {})
        log.info("batch %d: %s; trigger %d ms (latestOffset %d, planning %d, addBatch %d, walCommit %d, commit %d)",
                 progress["batchId"], self._batch_times.pop(progress["batchId"]), d.get("triggerExecution", 0),
                 d.get("latestOffset", 0), d.get("queryPlanning", 0), d.get("addBatch", 0), d.get("walCommit", 0),
                 d.get("commitOffsets", 0))
        self._batch_times = {k: v for k, v in self._batch_times.items() if k > progress["batchId"]}

    def _drop_publisher(self) -> None:
        """A failed delivery may leave the idempotent producer fenced (a new broker, a deleted topic knows nothing
        of its producer id): the restarted query gets a new one, made after the topic is ensured."""
        if self._publisher is not None:
            self._publisher.abandon()
            self._publisher = None

    def _ensure_output(self) -> None:
        """Before a restart: the topic may have been deleted, or the output cluster may still be down."""
        try:
            self.prepare_output()
        except Exception as exc:  # noqa: BLE001 - the restarted batch reports a lasting problem itself
            log.warning("output topic %s not ready: %s", self.first.output_topic, first_line(exc))

    def _graceful_stop(self, query: Any, timeout: float = 60.0) -> None:
        """Let the micro-batch running now publish and commit, then stop. Only that one: when batches run back to
        back (a batch longer than the interval) the trigger is always active, and waiting for it to go idle took the
        whole timeout. A batch stopped as it starts is re-run from the journal on restart."""
        deadline = self.clock.monotonic() + timeout
        running = (query.lastProgress or {}).get("batchId")
        while query.isActive and query.status.get("isTriggerActive") and self.clock.monotonic() < deadline:
            if (query.lastProgress or {}).get("batchId") != running:
                break  # the batch that was running has committed
            time.sleep(0.1)
        query.stop()


def output_ready(prepare: Callable[[], str], resuming: bool, stop: threading.Event, warn: Callable[[str], None],
                 first_wait: float = 2.0, longest_wait: float = 10.0, give_up_after: dt.timedelta | None = None,
                 clock: Clock = SYSTEM) -> str | None:
    """`prepare()`'s outcome once the output cluster answers. On a first start a failure is raised at once: an
    unreachable address is most likely a wrong one, and the operator is at the terminal. A job resuming from its
    checkpoint reached that address before, so it waits an outage out (a warning per try, backoff up to
    `longest_wait`): exiting would hand the same wait to a service manager's restart loop and cost a Spark start-up
    once the cluster is back, while no decision can be published either way. None when stopped while waiting;
    GaveUp once the outage has lasted `give_up_after` (quota.pipeline.run.give.up.after; None or PT0S: never),
    so that a supervisor sees a job that cannot work."""
    wait, started = first_wait, clock.monotonic()
    while True:
        try:
            return prepare()
        except Exception as exc:  # noqa: BLE001 - any client error means the same thing here
            if not resuming:
                raise
            waited = clock.monotonic() - started
            if give_up_after and waited >= give_up_after.total_seconds():
                raise GaveUp(f"giving up: the output cluster has not answered for {waited:.0f} s "
                             f"(quota.pipeline.run.give.up.after={isodate.duration_isoformat(give_up_after)}): "
                             f"{first_line(exc)}; exiting with code {GAVE_UP} so that the supervisor restarts the "
                             f"job or alerts") from None
            warn(f"output cluster not reachable ({first_line(exc)}); the job resumes from its checkpoint, so it "
                 f"waits for the cluster: next try in {wait:.0f} s")
            if stop.wait(wait):
                return None
            wait = min(longest_wait, wait * 2)


def describe_batch(rows: list[Any], stages: list[StageTime], collect_s: float, publish_s: float) -> str:
    """What a micro-batch did: decisions, observed_at spread, each Spark stage (the source's polls and the shuffle
    write first, the stateful step last), the collect on the driver (it includes the stages) and the publication."""
    spread = 0.0
    if rows:
        observed = [r.observed_at for r in rows]
        spread = (max(observed) - min(observed)).total_seconds()
    parts = ", ".join(f"stage {s.stage_id} {s.seconds * 1000:.0f} ms ({s.tasks} tasks, {s.task_seconds * 1000:.0f} ms "
                      f"in tasks)" for s in stages)
    return (f"{len(rows)} decisions, observed_at spread {spread * 1000:.0f} ms; {parts or 'no stage'}; "
            f"collect {collect_s * 1000:.0f} ms, publish {publish_s * 1000:.0f} ms")


def _log_failure(done: Future) -> None:
    if done.exception() is not None:
        log.warning("metrics not updated: %s", first_line(done.exception()))


def predictive_cause(row: Any) -> str:
    """What the factor-change log line adds when the row's record says a predictive throttle is the reason for its
    factor ('; predictive: broker 2 /data/x reaches the hard limit in 14 min ...'), else nothing."""
    value = getattr(row, "value", None)
    cause = predictive_of(json.loads(value).get("predictive")) if value else None
    return "" if cause is None else f"; predictive: {predictive_text(cause)}"
