"""`quota-pipeline prepare`: this host's JVM class archive, so that the job (and every command) starts Spark sooner."""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from quota_pipeline.commands.common import configure_logging

BATCHES = 3  # micro-batches of the job's own query before the archive is written: its classes are loaded by then


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="make Spark start sooner on this host: archive the JVM classes the job loads (once per install)",
        description="Run the streaming job's own query for a few micro-batches against a simulated cluster (no "
                    "network, nothing published), then write the classes its JVM loaded as a class-data sharing "
                    "archive under $XDG_CACHE_HOME/quota-pipeline (about 120 MB). Every Spark JVM a command of this "
                    "package starts locally then maps it instead of loading, parsing and verifying those classes: "
                    "Spark's session starts about 3 s sooner on 2 cores, and so does a restarted job's first "
                    "decision. The archive belongs to this Java and this Spark: after upgrading either, run prepare again (the old one is no longer used). Run it "
                    "where the job runs (in a container image: at build time). Exit codes: 0 written or already "
                    "there; 1 it could not be written; 3 no Java.",
    )
    p.add_argument("--force", action="store_true", help="write the archive again even if there is one")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from quota_pipeline.session import archive_in_use, archive_path, require_java

    require_java()
    path = archive_path()
    assert path is not None  # require_java found one
    if archive_in_use(path) and not args.force:
        print(f"the class archive is there already: {path} (--force writes it again)")
        return 0
    configure_logging(quiet_level=logging.WARNING, timestamps=True)
    print(f"running the job's query for {BATCHES} micro-batches over a simulated cluster, then writing the classes "
          f"its JVM loaded to {path} (about a minute)", flush=True)
    started = time.monotonic()
    try:
        size = _record(path)
    except Exception as exc:  # noqa: BLE001 - whatever failed, the job still runs without an archive
        print(f"error: could not write the class archive {path}: {exc}; the job runs without one (it starts "
              f"slower); check the free space there and run prepare again", file=sys.stderr)
        return 1
    print(f"wrote {path} ({size / 2 ** 20:.0f} MiB) in {time.monotonic() - started:.0f} s: Spark's JVMs on this "
          f"host map it from now on")
    return 0


def _record(path: Path) -> int:
    """The job's query run over a simulated cluster in a recording JVM, then its classes written to `path`."""
    from quota_pipeline.core import config as cfg
    from quota_pipeline.session import write_archive
    from quota_pipeline.simulator import Simulator
    from quota_pipeline.streaming.query import StreamJob

    with tempfile.TemporaryDirectory(prefix="quota-pipeline-prepare-") as work:
        sim = Simulator({"cluster_id": "prepare", "brokers": 3, "log_dirs": 2,
                         "defaults": {"total_bytes": "1TB", "used_ratio": 0.5}}, port=0).start()
        try:
            conf = cfg.parse({cfg.BOOTSTRAP: sim.bootstrap_servers, cfg.HARD_RATIO: "0.1",
                              cfg.CHECK_INTERVAL_SECONDS: "1", cfg.CHECKPOINT_PATH: str(Path(work) / "checkpoint")},
                             "prepare")
            job = StreamJob([conf])
            spark = job.spark_session(record_classes=True)
            spark.sparkContext.setLogLevel("ERROR")  # a first batch "falling behind" its 1 s trigger is expected
            query = (job.decisions(spark).writeStream.format("noop")
                     .option("checkpointLocation", str(Path(work) / "checkpoint" / "query"))
                     .trigger(processingTime="1 second").start())
            deadline = time.monotonic() + 300
            while (query.lastProgress or {}).get("batchId", -1) < BATCHES - 1:
                if query.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the job's query did not run: {query.exception() or 'no batch in 300 s'}")
                time.sleep(0.2)
            query.stop()
            return write_archive(spark, path)
        finally:
            sim.stop()
