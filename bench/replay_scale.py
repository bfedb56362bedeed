"""Benchmark: `quota-pipeline replay` against DuckDB's exploded-range plan on the same flattened Parquet journal.

    python3 -m bench.replay_scale --rows 1000000                 # replay vs DuckDB, and the time per stage
    python3 -m bench.replay_scale --rows 10000000 --spark --repeat 3   # ... replay --engine spark too; medians of 3
    python3 -m bench.replay_scale --rows 10000000 --sweep        # ... and a 5-value --sweep against one replay
    python3 -m bench.replay_scale --rows 100000000 --no-duckdb --no-stages   # replay alone: time and peak RSS
    python3 -m bench.replay_scale --rows 2000000 --layout sorted,exported   # the same rows in both layouts, one run

Generates the journal once under bench/out/ (reused when present; harness/synthetic_journals.py flat_parquet_journal: one
cluster, 10 brokers x 5 log dirs, 5% failed polls, one row per volume, zstd), in the `--layout` asked: "sorted"
(time order, dictionary-encoded columns) or "exported" (the same rows as another tool might export them: the
failed polls' rows at the end of the file, `log_dir` as plain strings, the brokers list on every row); several
layouts, comma-separated, are measured one after the other in the same run. Then, per file:
DuckDB's exploded-range query of DESIGN.md (numbered snapshots, every reading an interval of snapshot numbers
until the key's next reading or its expiry, exploded and aggregated per snapshot; in-process, all cores), and
`quota-pipeline replay` as a subprocess, start-up included, with the CLI's default driver memory (its peak RSS:
VmHWM of the child processes, the driver's JVM and the Python processes, from /proc). `--stages` (default on) runs
where replay's time goes (start-up, plan, the cluster pass without Spark, replay.run), in this process. The machine is shared:
the load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness import synthetic_journals

ROOT = Path(__file__).resolve().parent.parent

CONFIG = """client.quota.callback.static.storage.per.volume.limit.min.available.ratio=0.05
client.quota.callback.static.throttle.factor.validity.duration=PT5M
client.quota.callback.static.throttle.factor.fallback=0.5
client.quota.callback.static.storage.check.interval=PT10S
"""
SWEEP = "storage.per.volume.limit.min.available.ratio=0.02,0.03,0.05,0.07,0.09"
BROKERS, LOG_DIRS, FAILED = 10, 5, 0.05
console = Console(width=120)


def journal(out: Path, rows: int, layout: str = "sorted") -> tuple[Path, int]:
    """The flattened journal of about `rows` volume rows in `layout`, generated once."""
    path = out / (f"flat-{BROKERS}x{LOG_DIRS}-{rows}" + ("" if layout == "sorted" else f"-{layout}") + ".parquet")
    count = path.with_suffix(".rows")
    if not path.exists():
        # Rows per snapshot: the volumes of a successful poll (~2% miss a broker), one row per failed poll.
        per_snapshot = (1 - FAILED) * BROKERS * LOG_DIRS * (1 - 0.02 / BROKERS) + FAILED
        snapshots = round(rows / per_snapshot)
        started = time.monotonic()
        tmp = path.with_suffix(".tmp")
        with console.status(f"generating {snapshots:,} snapshots") as status:
            n = synthetic_journals.flat_parquet_journal(tmp, BROKERS, LOG_DIRS, snapshots, failed=FAILED, layout=layout,
                                           progress=lambda i: status.update(f"generating: {i:,}/{snapshots:,}"))
        tmp.rename(path)
        count.write_text(str(n))
        console.print(f"generated {path} ({n:,} rows, {path.stat().st_size / 1e6:.0f} MB) "
                      f"in {time.monotonic() - started:.0f} s")
    return path, int(count.read_text())


def duckdb_query(path: Path, validity_us: int, hard_ratio: float) -> str:
    """DESIGN.md's exploded-range plan: readings (SUCCESS, with bytes or offline) of numbered snapshots become
    [seq, min(next reading of the key, expiry)) ranges, exploded and aggregated per snapshot."""
    return f"""
WITH raw AS (SELECT cluster_id, status, broker_id, log_dir, total_bytes, available_bytes, error,
                    epoch_us(CAST(observed_at AS TIMESTAMP)) AS t_us FROM read_parquet('{path}')),
snaps AS (SELECT cluster_id, t_us, any_value(status) AS status FROM raw GROUP BY ALL),
numbered AS (SELECT *, row_number() OVER w - 1 AS seq,
               count(*) OVER (PARTITION BY cluster_id ORDER BY t_us
                              RANGE BETWEEN UNBOUNDED PRECEDING AND {validity_us - 1} FOLLOWING) AS expires_at,
               count(*) OVER (PARTITION BY cluster_id) AS n
             FROM snaps WINDOW w AS (PARTITION BY cluster_id ORDER BY t_us)),
ev AS (SELECT r.cluster_id, r.broker_id, r.log_dir, r.total_bytes, r.available_bytes, r.error IS NOT NULL AS offline,
              n.seq, n.expires_at, n.n
       FROM raw r JOIN numbered n USING (cluster_id, t_us) WHERE r.status = 'SUCCESS' AND r.broker_id IS NOT NULL),
spans AS (SELECT *, greatest(seq + 1, least(coalesce(lead(seq) OVER (PARTITION BY cluster_id, broker_id, log_dir
                                                                    ORDER BY seq), n), expires_at)) AS e FROM ev),
cached AS (SELECT cluster_id, broker_id, available_bytes, total_bytes, offline, unnest(range(seq, e)) AS seq FROM spans),
agg AS (SELECT cluster_id, seq, count(*) AS active_log_dirs,
               sum(CASE WHEN offline OR available_bytes <= {hard_ratio} * total_bytes THEN 1 ELSE 0 END) AS violations,
               min(CASE WHEN total_bytes = 0 THEN 0.0 ELSE available_bytes / total_bytes END) AS min_ratio,
               list_distinct(list(broker_id)) AS covered
        FROM cached GROUP BY cluster_id, seq)
SELECT n.cluster_id, n.seq, n.status, coalesce(a.violations, 0) AS violations, a.min_ratio, a.active_log_dirs,
       a.covered
FROM numbered n LEFT JOIN agg a USING (cluster_id, seq) ORDER BY n.cluster_id, n.seq"""


def run_duckdb(path: Path, work: Path) -> tuple[float, int]:
    import duckdb

    con = duckdb.connect()
    started = time.monotonic()
    target = work / "duckdb-summaries.parquet"
    con.execute(f"COPY ({duckdb_query(path, 300_000_000, 0.05)}) TO '{target}' (FORMAT parquet)")
    elapsed = time.monotonic() - started
    return elapsed, con.execute(f"SELECT count(*) FROM '{target}'").fetchone()[0]


@dataclass
class Peak:
    """Largest VmHWM seen per kind of process (java = the driver JVM, python = the CLI and its workers)."""

    java: int = 0
    python: int = 0
    pids: dict[int, tuple[str, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(hwm for _, hwm in self.pids.values())


def _children(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


def watch(proc: subprocess.Popen, peak: Peak) -> None:
    """Polls the process tree's VmHWM (each process's own peak) until it ends."""
    while proc.poll() is None:
        for pid in _children(proc.pid):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            name = status.split("\n", 1)[0].split()[-1]
            hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")), 0)
            peak.pids[pid] = (name, max(hwm, peak.pids.get(pid, ("", 0))[1]))
        peak.java = max([h for n, h in peak.pids.values() if n == "java"], default=0)
        peak.python = max([h for n, h in peak.pids.values() if n.startswith("python")], default=0)
        time.sleep(0.5)


def run_replay(path: Path, work: Path, extra: list[str], package_path: str | None = None
               ) -> tuple[float, Peak, str]:
    conf = work / "bench.properties"
    conf.write_text(CONFIG)
    cmd = [sys.executable, "-m", "quota_pipeline.cli", "replay", "--config", str(conf), "--input", str(path),
           "--output", str(work / "decisions.parquet"), *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_path, str(ROOT)])), "COLUMNS": "120"}
    peak = Peak()
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work))
        watcher = threading.Thread(target=watch, args=(proc, peak), daemon=True)
        watcher.start()
        code = proc.wait()
        elapsed = time.monotonic() - started
        watcher.join()
        log.seek(0)
        text = log.read()
    if code != 0:
        console.print(text[-3000:])
        raise SystemExit(f"replay exited with {code}")
    return elapsed, peak, "\n".join(line for line in text.splitlines() if "Stage" not in line)


def stages(path: Path, work: Path) -> dict[str, float]:
    """Where replay's time goes, in this process: the driver's plan, the cluster pass alone (pyarrow read, rule
    checks, the compiled decision steps, the record batches; the next chunk read and checked while one is decided),
    replay.run without Spark (the pass, the records written), then Spark's start-up and replay.run on Spark."""
    from quota_pipeline.core.config import parse
    from quota_pipeline.core.settings import Settings
    from quota_pipeline.replay import job
    from quota_pipeline.replay.cluster_files import ClusterFiles
    from quota_pipeline.session import get_session

    settings = Settings.of(parse(dict(line.split("=", 1) for line in CONFIG.split()), require_admin=False))
    out: dict[str, float] = {}
    t = time.monotonic()
    tasks = job.plan_tasks([str(path)])
    out["plan: which clusters each file holds (driver, pyarrow)"] = time.monotonic() - t
    t = time.monotonic()
    passes = [ClusterFiles(task, settings) for task in tasks]
    snapshots = sum(b.num_rows for p in passes for b in p.batches())
    out[f"cluster pass alone, one process, no Spark ({snapshots:,} decisions)"] = time.monotonic() - t
    t = time.monotonic()
    job.run(None, settings, str(path), str(work / "records-local.parquet"))
    out["replay.run without Spark: the pass + write Parquet"] = time.monotonic() - t
    t = time.monotonic()
    spark = get_session("bench-replay-stages", conf={"spark.driver.memory": "2g", "spark.ui.showConsoleProgress": "false"})
    out["Spark start-up (JVM, session)"] = time.monotonic() - t
    t = time.monotonic()
    job.run(spark, settings, str(path), str(work / "records.parquet"))
    out["replay.run on Spark: tasks + sort + write Parquet"] = time.monotonic() - t
    spark.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="volume rows of the generated journal")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out"))
    ap.add_argument("--no-duckdb", action="store_true")
    ap.add_argument("--no-stages", action="store_true")
    ap.add_argument("--package-path", help="also replay with this directory first on PYTHONPATH (an earlier commit's "
                                          "package, from `git archive COMMIT quota_pipeline`), right after the "
                                          "current one: before and after in one run")
    ap.add_argument("--sweep", action="store_true", help=f"also time replay --sweep {SWEEP}")
    ap.add_argument("--repeat", type=int, default=1, help="DuckDB then replay, this many times; the medians compared")
    ap.add_argument("--spark", action="store_true", help="also time replay --engine spark (the same tasks on Spark)")
    ap.add_argument("--layout", default="sorted",
                    help="how the journal's rows are written, comma-separated to measure several one after the other: "
                         "sorted (time order, dictionary-encoded; the default) or exported (failed polls' rows at the "
                         "end, log_dir as plain strings, brokers on every row)")
    args = ap.parse_args()
    layouts = args.layout.split(",")
    if not set(layouts) <= set(synthetic_journals.LAYOUTS):
        print(f"--layout takes {' or '.join(synthetic_journals.LAYOUTS)} (comma-separated), not {args.layout!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [journal(out, args.rows, layout) for layout in layouts]  # generated before any timing
    for path, rows in paths:
        measure(args, out, path, rows)
    return 0


def measure(args: argparse.Namespace, out: Path, path: Path, rows: int) -> dict:
    """DuckDB, replay (and the stages) on one journal file; the table printed, the figures in results.json."""
    work = Path(tempfile.mkdtemp(prefix="replay-bench-", dir=out))
    load_before = os.getloadavg()
    table = Table(title=f"{path.name}: {rows:,} volume rows, {path.stat().st_size / 1e6:.0f} MB "
                        f"({os.cpu_count()} cores)")
    for col in ("run", "seconds", "M rows/s", "vs DuckDB", "peak RSS (MiB)"):
        table.add_column(col, justify="left" if col == "run" else "right")
    duck_rate = None
    # Run after run, DuckDB then replay, --repeat times: the machine's CPU is shared (steal), so each side's median.
    duck_runs: list[float] = []
    replay_runs: list[float] = []
    peak = Peak()  # the run's with the largest total
    n = 0
    for _ in range(args.repeat):
        if not args.no_duckdb:
            d_elapsed, n = run_duckdb(path, work)
            duck_runs.append(d_elapsed)
        r_elapsed, r_peak, log = run_replay(path, work, [])
        replay_runs.append(r_elapsed)
        peak = r_peak if r_peak.total >= peak.total else peak
    runs = (lambda xs: f" (runs: {', '.join(f'{x:.1f}' for x in xs)})" if len(xs) > 1 else "")
    if duck_runs:
        elapsed = statistics.median(duck_runs)
        duck_rate = rows / elapsed
        table.add_row(f"DuckDB exploded-range query ({n:,} snapshots){runs(duck_runs)}", f"{elapsed:.1f}",
                      f"{duck_rate / 1e6:.3f}", "1.00", "")
    elapsed = statistics.median(replay_runs)
    rate = rows / elapsed
    table.add_row(f"quota-pipeline replay (subprocess, start-up included; the default engine: this host's cores)"
                  f"{runs(replay_runs)}", f"{elapsed:.1f}", f"{rate / 1e6:.3f}",
                  f"{rate / duck_rate:.3f}" if duck_rate else "",
                  f"java {peak.java / 1024:.0f} + python {peak.python / 1024:.0f} (all: {peak.total / 1024:.0f})")
    results = {"file": path.name, "rows": rows, "replay_s": elapsed, "replay_rate": rate, "duckdb_rate": duck_rate,
               "duckdb_runs_s": duck_runs, "replay_runs_s": replay_runs,
               "java_hwm_kib": peak.java, "python_hwm_kib": peak.python, "all_hwm_kib": peak.total}
    if args.spark:
        k_elapsed, k_peak, _ = run_replay(path, work, ["--engine", "spark"])
        table.add_row("replay --engine spark (the tasks on Spark, local[*])", f"{k_elapsed:.1f}",
                      f"{rows / k_elapsed / 1e6:.3f}", f"{rows / k_elapsed / duck_rate:.3f}" if duck_rate else "",
                      f"java {k_peak.java / 1024:.0f} + python {k_peak.python / 1024:.0f}")
        results.update(spark_s=k_elapsed, spark_java_hwm_kib=k_peak.java, spark_python_hwm_kib=k_peak.python)
    if args.package_path:
        b_elapsed, b_peak, _ = run_replay(path, work, [], args.package_path)
        table.add_row(f"the same, package from {args.package_path}", f"{b_elapsed:.1f}", f"{rows / b_elapsed / 1e6:.3f}",
                      f"{rows / b_elapsed / duck_rate:.3f}" if duck_rate else "",
                      f"java {b_peak.java / 1024:.0f} + python {b_peak.python / 1024:.0f}")
        results.update(before_s=b_elapsed, before_package=args.package_path)
    if args.sweep:
        s_elapsed, s_peak, s_log = run_replay(path, work, ["--sweep", SWEEP])
        table.add_row(f"replay --sweep (5 values) = {s_elapsed / elapsed:.2f} x one replay", f"{s_elapsed:.1f}",
                      f"{rows / s_elapsed / 1e6:.3f}", f"{rows / s_elapsed / duck_rate:.3f}" if duck_rate else "",
                      f"java {s_peak.java / 1024:.0f} + python {s_peak.python / 1024:.0f}")
        results.update(sweep_s=s_elapsed, sweep_ratio=s_elapsed / elapsed)
        console.print(s_log[-4000:])
    load_after = os.getloadavg()
    console.print(table)
    console.print(f"load average (1, 5, 15 min): before {load_before[0]:.1f} {load_before[1]:.1f} "
                  f"{load_before[2]:.1f}, after {load_after[0]:.1f} {load_after[1]:.1f} {load_after[2]:.1f}")
    if not args.no_stages:
        st = Table(title="where replay's time goes (in this process, one after the other)")
        st.add_column("stage")
        st.add_column("seconds", justify="right")
        for name, seconds in stages(path, work).items():
            st.add_row(name, f"{seconds:.1f}")
        console.print(st)
        results["load_after_stages"] = os.getloadavg()
        console.print(f"load average after the stages: {results['load_after_stages'][0]:.1f}")
    results.update(load_before=load_before, load_after=load_after)
    (work / "results.json").write_text(json.dumps(results, indent=1))
    console.print(f"results: {work / 'results.json'}")
    return results


if __name__ == "__main__":
    sys.exit(main())
