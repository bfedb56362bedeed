"""Benchmark: the compiled kernel (core/kernel.py) against an earlier revision of it: numba compile time, run time,
and whether both give the same outputs.

    python3 -m bench.kernel_steps --against 4fbac9b --rounds 3

Compile: a fresh process per variant and round imports the kernel and makes its first call with an empty
NUMBA_CACHE_DIR (a fresh install's first run); its CPU time (user, the whole process: imports too) and the first
call's wall time are printed, variants interleaved. Run: 2,000 snapshots x 500 log dirs (about 950,000 volume rows,
5 % failed polls, 0.1 % offline readings, the pin policy, 5 closest volumes) decided from an empty state, best of 8
calls with the cache warm. The load average is printed: the machine is shared.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
S, K, B = 2000, 500, 10


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def chunk(kernel, np, seed: int = 3):
    rng = np.random.default_rng(seed)
    ok = rng.random(S) > 0.05
    rows_at = np.concatenate([[0], np.cumsum(np.where(ok, K, 0))]).astype(np.int64)
    r = int(rows_at[-1])
    return kernel.Chunk(
        t=1_700_000_000_000_000 + np.arange(S, dtype=np.int64) * 10_000_000, ok=ok,
        brokers_at=np.arange(S + 1, dtype=np.int64) * B, brokers=np.tile(np.arange(B, dtype=np.int64), S),
        fenced_at=np.zeros(S + 1, np.int64), fenced=np.zeros(0, np.int64), rows_at=rows_at,
        key=np.tile(np.arange(K, dtype=np.int64), S)[:r], total=np.full(r, 1000, np.int64),
        available=rng.integers(0, 1000, r).astype(np.int64), offline=rng.random(r) < 0.001,
        row=np.arange(r, dtype=np.int64), key_broker=(np.arange(K) % B).astype(np.int64))


def child(path: str, mode: str) -> None:
    """In a fresh process: compile (first call) or run (best of 8) one variant; a JSON line on stdout."""
    import resource

    import numpy as np

    kernel = load(path)
    params = kernel.Params(60_000_000, kernel.RATIO, 0.05, kernel.RATIO, 0.2, 0.5, 1, True, 5)
    c = chunk(kernel, np)
    t = time.perf_counter()
    out = kernel.run(kernel.State.empty(K, B), c, params)
    first = time.perf_counter() - t
    if mode == "compile":
        print(json.dumps({"first_call_s": first, "cpu_s": resource.getrusage(resource.RUSAGE_SELF).ru_utime}))
        return
    best = min(_timed(kernel, c, params) for _ in range(8))
    digest = [hashlib.sha256(np.asarray(getattr(out, f)).tobytes()).hexdigest() for f in out.__dataclass_fields__]
    print(json.dumps({"run_ms": best * 1e3, "rows": int(len(c.key)), "outputs": digest}))


def _timed(kernel, c, params) -> float:
    t = time.perf_counter()
    kernel.run(kernel.State.empty(K, B), c, params)
    return time.perf_counter() - t


def measure(path: str, mode: str, cache_dir: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    done = subprocess.run([sys.executable, __file__, "--child", path, mode], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default="HEAD", help="git revision whose core/kernel.py is the other variant")
    ap.add_argument("--rounds", type=int, default=3, help="compile measurements per variant (interleaved)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "kernel_against.py"
        old.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{args.against}:quota_pipeline/core/kernel.py"],
                                      check=True, capture_output=True, text=True).stdout)
        variants = {f"kernel at {args.against}": str(old), "kernel now": str(ROOT / "quota_pipeline/core/kernel.py")}
        print(f"load average {os.getloadavg()}")
        compiled = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, path in variants.items():
                cache = Path(tmp) / f"cold-{r}-{len(compiled[name])}-{name.split()[-1]}"
                compiled[name].append(measure(path, "compile", str(cache)))
        runs = {name: measure(path, "run", str(Path(tmp) / f"warm-{name.split()[-1]}")) for name, path in
                variants.items()}
        for name in variants:
            cpu = sorted(m["cpu_s"] for m in compiled[name])
            wall = sorted(m["first_call_s"] for m in compiled[name])
            print(f"{name:28} compile: process CPU {' '.join(f'{x:.1f}' for x in cpu)} s (median "
                  f"{cpu[len(cpu) // 2]:.1f}), first call {' '.join(f'{x:.1f}' for x in wall)} s; "
                  f"run: {runs[name]['run_ms']:.0f} ms for {runs[name]['rows']:,} rows")
        outputs = [r["outputs"] for r in runs.values()]
        print("same outputs:", all(o == outputs[0] for o in outputs))
        print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
