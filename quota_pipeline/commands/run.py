"""`quota-pipeline run CONFIG...`: the streaming job, one properties file per observed cluster."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from quota_pipeline.commands.common import add_config_argument, configure_logging, fail, load_or_exit
from quota_pipeline.core.config import RUN_GIVE_UP_AFTER
from quota_pipeline.streaming.restarts import GAVE_UP, GaveUp


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run the streaming job: observe clusters, decide, publish to the compacted topic",
        description="Run the streaming job. Each CONFIG is a Strimzi-compatible .properties file for one "
                    "observed cluster; all of them are polled in parallel every check interval. Decisions go "
                    "to the compacted topic (quota.pipeline.output.topic, created if missing), metrics to "
                    "http://<metrics.host>:<metrics.port>/metrics, state and offsets to the checkpoint path "
                    "of the first CONFIG. At start it reads the output cluster's replica.lag.time.max.ms and warns "
                    "when a config's validity does not cover the check interval plus the longest acks=all stall "
                    "(docs/design.md). The terminal shows the job's own lines; Spark's and the Kafka client's go to "
                    "the log file (--log-file, named at start) or, with -v, here too. "
                    "Without a JVM class archive on this host (`quota-pipeline prepare`), the job writes one in the "
                    "background after its first decision, so the next start is faster (--no-prepare: not). The job "
                    "measures its start (process start to first published decision), serves it as "
                    "quota_pipeline_last_start_duration_seconds, keeps it in <checkpoint>/start.json and warns at the "
                    "next start when a config's validity does not cover twice it. "
                    "SIGTERM or Ctrl-C stops after the running micro-batch. A failed micro-batch "
                    "restarts the query from the checkpoint (backoff 2 s doubling to 60 s) until "
                    f"{RUN_GIVE_UP_AFTER} (default PT15M) has passed with no micro-batch published: then it gives "
                    "up, as it does when resuming while the output cluster stays unreachable that long. Exit codes: 0 stopped by a signal; 1 the output cluster or the metrics port cannot be used; "
                    f"2 a configuration problem; 3 no Java; {GAVE_UP} gave up (the query kept failing, or the output "
                    "cluster stayed unreachable), so that a supervisor restarts the job or alerts.",
    )
    add_config_argument(p, ".properties file(s), one per cluster", required=False, many=True, dest="configs")
    p.add_argument("--clusters-dir", metavar="DIR", help="also run every *.properties file in DIR")
    p.add_argument("--master", help="Spark master (default local[*] with task retries)")
    p.add_argument("--no-metrics", action="store_true",
                   help="do not start the Prometheus endpoint (nor keep the per-log-dir gauges it would serve)")
    p.add_argument("--log-batches", action="store_true",
                   help="log one line per micro-batch: decisions, observed_at spread, time per Spark stage, "
                        "collect, publication and Spark's own durations (for benchmarks and tuning)")
    p.add_argument("--log-file", metavar="FILE",
                   help="where Spark's JVM, its Python workers and librdkafka write (appended; default run.log in "
                        "a local checkpoint directory, else in quota-pipeline-UID/ in the temporary directory)")
    p.add_argument("--no-prepare", action="store_true",
                   help="when this host has no JVM class archive, do not write one in the background after the first "
                        "decision (a second JVM for about a minute at nice 5); `quota-pipeline "
                        "prepare` writes it on demand")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show Spark's, its Python workers' and librdkafka's own lines here too")
    p.set_defaults(func=run)


def log_file(args: argparse.Namespace, checkpoint_path: str) -> Path | None:
    """The file for Spark's and librdkafka's lines (None with -v: they stay on this process's stdout/stderr)."""
    if args.verbose:
        return None
    from quota_pipeline.streaming.checkpoint_files import is_local

    if args.log_file:
        path = Path(args.log_file)
    elif is_local(checkpoint_path):
        path = Path(checkpoint_path.removeprefix("file:")) / "run.log"
    else:  # a directory of this user's own in the shared temporary directory: nobody else chooses the file
        path = Path(tempfile.gettempdir()) / f"quota-pipeline-{os.getuid()}" / "run.log"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.parent.is_symlink() or path.parent.stat().st_uid != os.getuid():
            fail(f"{path.parent} belongs to another user; pass --log-file FILE or -v")
        path.open("ab").close()
    except OSError as exc:
        fail(f"cannot write the log file {path} ({exc.strerror}); pass --log-file FILE or -v")
    return path


def stop_on_signals(job, log: logging.Logger) -> None:
    """SIGTERM and Ctrl-C alike: one line, then the job stops after the running micro-batch (StreamJob keeps this
    SIGINT handler when the SparkContext installs its own)."""
    def stop(signum, _frame) -> None:
        log.info("received %s: stopping after the running micro-batch", signal.Signals(signum).name)
        job.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def to_log_file(job, path: Path, log: logging.Logger) -> None:
    """Spark's JVM (when started here) and librdkafka write to `path`; the workers' own lines come back from it."""
    from quota_pipeline.kafka.publisher import LIBRDKAFKA_LOG

    job.spark_log = str(path)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.getLogger().handlers[0].formatter)
    LIBRDKAFKA_LOG.addHandler(to_file)
    LIBRDKAFKA_LOG.propagate = False
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit's JVM writes where it was told
    log.info("%s own lines go to %s (-v: here too)",
             "the Kafka client's" if submitted else "Spark's and the Kafka client's", path)
    if not submitted:
        from quota_pipeline.streaming import worker_lines

        os.environ[worker_lines.ENV] = "1"  # the JVM's environment, so its Python workers'
        worker_lines.follow(path, log)


def config_paths(args: argparse.Namespace) -> list[str]:
    paths = list(args.configs)
    if args.clusters_dir:
        found = sorted(str(p) for p in Path(args.clusters_dir).glob("*.properties"))
        if not found:
            fail(f"{args.clusters_dir}: no *.properties files found")
        paths += found
    if not paths:
        fail("give at least one CONFIG (or --clusters-dir DIR); see quota-pipeline run --help")
    return paths


def run(args: argparse.Namespace) -> int:
    configs = [load_or_exit(p) for p in config_paths(args)]
    from quota_pipeline.session import require_java

    require_java()  # before any service starts, not after
    from quota_pipeline.streaming.query import JobConfigError, StreamJob

    try:
        job = StreamJob(configs, master=args.master, log_batches=args.log_batches,
                        volume_gauges=not args.no_metrics)
    except JobConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    configure_logging(quiet_level=logging.INFO, timestamps=True)
    log = logging.getLogger("quota_pipeline")
    spark_log = log_file(args, job.first.checkpoint_path)
    if spark_log is not None:
        to_log_file(job, spark_log, log)

    stop_on_signals(job, log)  # from here on: a stop also ends the wait for the output cluster
    try:
        outcome = job.start_output()
    except GaveUp as exc:
        print(exc, file=sys.stderr)
        return GAVE_UP
    except Exception as exc:  # noqa: BLE001 - any client error means the same thing to the operator
        print(f"error: cannot reach the output cluster {job.first.output_settings.get('bootstrap.servers')} "
              f"to create {job.first.output_topic}: {exc}; check quota.pipeline.output.kafka.* (or the "
              f"kafka.admin.* settings it defaults to)", file=sys.stderr)
        return 1
    if outcome is None:
        return 0
    log.info("output topic %s: %s", job.first.output_topic, outcome)
    from quota_pipeline.kafka.publisher import stall_warning

    warning, unchecked = stall_warning(configs)
    if warning:
        log.warning("%s", warning)
    elif unchecked:
        log.info("%s", unchecked)
    if not args.no_metrics:
        first = job.first
        try:
            job.metrics.serve(first.metrics_host, first.metrics_port)
            log.info("metrics on http://%s:%d/metrics", first.metrics_host, first.metrics_port)
        except OSError as exc:
            print(f"error: cannot serve metrics on {first.metrics_host}:{first.metrics_port} ({exc}); set "
                  f"quota.pipeline.metrics.port or pass --no-metrics", file=sys.stderr)
            return 1

    for c in configs:
        log.info("observing %s every %ss (%s)", c.bootstrap_servers, c.check_interval.total_seconds(), c.path)
    a_faster_start(args, configs, job, log, spark_log)
    return quiet_exit(job.run())


def a_faster_start(args: argparse.Namespace, configs: list, job, log: logging.Logger, spark_log: Path | None) -> None:
    """The warnings of the last start kept beside the checkpoint, and without a class archive for the JVM this
    process starts, one written in the background after the first decision (unless --no-prepare)."""
    from quota_pipeline.session import archive_in_use, archive_path
    from quota_pipeline.streaming import start_time

    for line in start_time.at_start(configs, job.first.checkpoint_path, job.metrics.start_seconds):
        log.warning("%s", line)
    if os.environ.get("PYSPARK_GATEWAY_PORT") or archive_in_use(archive_path()):  # spark-submit's JVM, or mapped
        return
    if args.no_prepare:
        log.info("no JVM class archive on this host: `quota-pipeline prepare` (once) makes Spark, and so a "
                 "restarted job, start sooner")
        return
    from quota_pipeline.commands.prepare import in_background

    log.info("no JVM class archive on this host: the job writes one in the background after its first decision, "
             "and the next start maps it (--no-prepare: not)")
    job.start_clock.on_first = lambda: in_background(log, spark_log)


def quiet_exit(code: int) -> int:
    """`code`, also when the reader of stdout/stderr went away (a `| tee` ended by the same Ctrl-C): the
    interpreter's last flush would otherwise fail and turn a clean stop into exit code 120."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
    return code
