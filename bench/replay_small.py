"""The first replay a new user runs: the bundled example journal with --report, timed as a subprocess.

    python3 -m bench.replay_small                 # 5 runs of the installed command
    python3 -m bench.replay_small --fresh --runs 5  # into a fresh install first: its first run compiles nothing yet

The command is `quota-pipeline replay --config conf/examples/example.properties --input conf/examples/journal.jsonl
--output out.jsonl --report r.html`, each run in a new directory. `--fresh` installs this checkout (not editable, no
dependencies: those of the running interpreter are reused through a .pth file) into a new virtual environment with
a new HOME, so that nothing is cached yet: no compiled kernel, no matplotlib font cache, no bytecode but pip's.
Prints the first run, the median and every run (wall time, and the CPU time the command used: on a busy host the
wall time waits for cores, the CPU time does not), the load average before and after, and the host's reference
(bench/host.py) before and after, which tells a slower host from slower code.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from bench.host import reference

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "conf" / "examples"


def fresh_install(base: Path) -> tuple[Path, dict[str, str]]:
    """A new venv holding this checkout, and an environment with a HOME nothing was cached in."""
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "reuse-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(ROOT)],
                   check=True, capture_output=True, text=True)
    home = base / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "PYTHONPATH")}
    env.update(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return venv / "bin" / "quota-pipeline", env


def run_once(command: list[str], env: dict[str, str], work: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the command and its children) of one run."""
    work.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([*command, "replay", "--config", str(EXAMPLES / "example.properties"), "--input",
                           str(EXAMPLES / "journal.jsonl"), "--output", "out.jsonl", "--report", "r.html"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0 or "without Spark" not in done.stderr:
        raise SystemExit(f"replay failed or started Spark (exit {done.returncode}): {done.stderr[-1500:]}")
    if len((work / "out.jsonl").read_text().splitlines()) != 400 or not (work / "r.html").stat().st_size:
        raise SystemExit("replay wrote no 400 records or no report")
    return elapsed, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fresh", action="store_true", help="install this checkout into a new venv and HOME first")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args()
    host_before, load_before = reference(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="replay-small-") as tmp:
        base = Path(tmp)
        if args.fresh:
            command, env = fresh_install(base)
            command = [str(command)]
        else:
            command, env = [sys.executable, "-m", "quota_pipeline.cli"], dict(os.environ)
        timed = [run_once(command, env, base / f"run{i}") for i in range(args.runs)]
    runs, cpu = [w for w, _ in timed], [c for _, c in timed]
    host_after, load_after = reference(), os.getloadavg()
    figures = {"fresh_install": args.fresh, "first_s": round(runs[0], 2), "median_s": round(statistics.median(runs), 2),
               "runs_s": [round(r, 2) for r in runs], "cpu_first_s": round(cpu[0], 2),
               "cpu_median_s": round(statistics.median(cpu), 2), "cores": os.cpu_count(),
               "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
               "host_before": host_before, "host_after": host_after}
    print(f"replay of the example journal with --report, {'from a fresh install' if args.fresh else 'installed'}:"
          f" first {figures['first_s']} s, median {figures['median_s']} s of {args.runs} ({figures['runs_s']}); CPU "
          f"(user + system) first {figures['cpu_first_s']} s, median {figures['cpu_median_s']} s")
    print(f"load average before {figures['load_before']}, after {figures['load_after']} ({figures['cores']} cores); "
          f"host reference (bench/host.py, stateful step ms) before {host_before['stateful_step_ms']}, "
          f"after {host_after['stateful_step_ms']}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
