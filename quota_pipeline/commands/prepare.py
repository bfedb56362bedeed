"""`quota-pipeline prepare`: this host's JVM class archive, so that the job (and every command) starts Spark sooner."""
from __future__ import annotations

import argparse
import fcntl
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from quota_pipeline.commands.common import configure_logging
from quota_pipeline.core.display import first_line

BATCHES = 3  # micro-batches of the job's own query before the archive is written: its classes are loaded by then
# The background prepare's niceness: low, not the lowest. Weighed against the job's micro-batches it takes about a
# quarter of a core they want. Lower still, on a host kept busy by others, the Python worker its Spark forks could
# not connect back within Spark's fixed 10 s, and no archive was written.
BACKGROUND_NICE = 5
# A background prepare that fails (a host busy for a while) tries again after a pause, this many times in all.
BACKGROUND_ATTEMPTS = 3
BACKGROUND_PAUSE_S = 60.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="make Spark start sooner on this host: archive the JVM classes the job loads (once per install)",
        description="Run the streaming job's own query for a few micro-batches against a simulated cluster (no "
                    "network, nothing published), then write the classes its JVM loaded as a class-data sharing "
                    "archive under $XDG_CACHE_HOME/quota-pipeline (about 120 MB). Every Spark JVM a command of this "
                    "package starts locally then maps it instead of loading, parsing and verifying those classes: "
                    "Spark's session starts about 3 s sooner on 2 cores, and so does a restarted job's first "
                    "decision. `run` writes it by itself in the background after its first decision when there is none, "
                    "so this command is for doing it ahead (in a container image: at build time). The archive is "
                    "written aside and renamed into place whole: a JVM never maps part of one. It belongs to this "
                    "Java and this Spark: after upgrading either, the old one is no longer used and a new one is "
                    "written. Exit codes: 0 written, already there, or (--background) being written by another "
                    "prepare; 1 it could not be written; 3 no Java.",
    )
    p.add_argument("--force", action="store_true", help="write the archive again even if there is one")
    p.add_argument("--background", action="store_true",
                   help=f"at a low CPU priority (nice {BACKGROUND_NICE}), and nothing to do while another prepare "
                        "writes the archive (how `run` calls it when the host has none)")
    p.set_defaults(func=run)


def in_background(log: logging.Logger, output: Path | None) -> None:
    """`prepare --background` in a process of its own, its lines to `output` (the job's log file; None: this
    process's); one line when it has ended. The archive is written aside and renamed into place whole
    (session.write_archive), so a JVM starting meanwhile maps no archive or a whole one, never part of one."""
    from quota_pipeline.session import archive_path
    from quota_pipeline.streaming import worker_lines

    out = open(output, "ab") if output is not None else None  # noqa: SIM115 - the child's for its lifetime
    # Its Spark workers' lines are its own, not the job's: none of them is relayed to the job's terminal.
    env = {k: v for k, v in os.environ.items() if k != worker_lines.ENV}
    try:
        child = subprocess.Popen([sys.executable, "-m", "quota_pipeline.cli", "prepare", "--background"],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT if out else None,
                                 env=env, start_new_session=True)  # a kill of the job's group leaves it to finish
    except OSError as exc:
        log.warning("could not start writing the JVM class archive (%s); `quota-pipeline prepare` writes it", exc)
        return
    finally:
        if out is not None:
            out.close()
    log.info("writing the JVM class archive %s in the background (pid %d, at nice %d)", archive_path(),
             child.pid, BACKGROUND_NICE)

    def ended() -> None:
        code = child.wait()
        if code == 0:
            log.info("the JVM class archive is ready: the next start maps it")
        else:
            log.warning("could not write the JVM class archive (exit %d%s); `quota-pipeline prepare` says why", code,
                        f", see {output}" if output else "")

    threading.Thread(target=ended, name="prepare", daemon=True).start()


def run(args: argparse.Namespace) -> int:
    from quota_pipeline.session import archive_in_use, archive_path, carry_priority, require_java

    require_java()
    path = archive_path()
    assert path is not None  # require_java found one
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - held until the process ends
        fcntl.flock(lock, fcntl.LOCK_EX | (fcntl.LOCK_NB if args.background else 0))
    except BlockingIOError:
        print(f"another prepare is writing the class archive {path}")
        return 0
    except OSError as exc:
        print(f"error: cannot write in {path.parent} ({exc.strerror}); the job runs without a class archive (it "
              f"starts slower); set XDG_CACHE_HOME to a directory this user can write", file=sys.stderr)
        return 1
    for stale in path.parent.glob(f".{path.name}.*.part"):  # of a prepare that was killed: none runs but this one
        stale.unlink(missing_ok=True)
    if archive_in_use(path) and not args.force:
        print(f"the class archive is there already: {path} (--force writes it again)")
        return 0
    if args.background:
        os.setpriority(os.PRIO_PROCESS, 0, BACKGROUND_NICE)  # whatever the job's own (nice -n -5 quota-pipeline run)
        carry_priority(os.getpid())  # its own session's share of the CPU, where the kernel groups by session
    configure_logging(quiet_level=logging.WARNING, timestamps=True)
    print(f"running the job's query for {BATCHES} micro-batches over a simulated cluster, then writing the classes "
          f"its JVM loaded to {path} (about a minute; Spark's own lines go to {spark_log(path)})", flush=True)
    attempts = BACKGROUND_ATTEMPTS if args.background else 1
    for attempt in range(1, attempts + 1):
        started = time.monotonic()
        try:
            size = _record(path)
            break
        except Exception as exc:  # noqa: BLE001 - whatever failed, the job still runs without an archive
            why = first_line(exc)[:300]
            if attempt < attempts:
                print(f"could not write the class archive {path} ({why}); trying again in "
                      f"{BACKGROUND_PAUSE_S * attempt:.0f} s ({attempt + 1} of {attempts})", flush=True)
                time.sleep(BACKGROUND_PAUSE_S * attempt)
                continue
            print(f"error: could not write the class archive {path}: {why}; the job runs without one "
                  f"(it starts slower); see {spark_log(path)}, check the free space there and run prepare again",
                  file=sys.stderr)
            return 1
    print(f"wrote {path} ({size / 2 ** 20:.0f} MiB) in {time.monotonic() - started:.0f} s: Spark's JVMs on this "
          f"host map it from now on")
    return 0


def spark_log(path: Path) -> Path:
    """Where the recording JVM and its Python workers write, beside the archive (the last prepare's only)."""
    return path.with_name(path.stem + ".prepare.log")


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
            spark_log(path).write_bytes(b"")  # the last attempt's lines only
            job.spark_log = str(spark_log(path))
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
