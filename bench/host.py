"""How fast this host runs the job's stateful step right now: the figure that tells a slower host from slower code.

The same 2-core VM has run the same commit's work at twice the CPU on another day (bench/RESULTS.md). A benchmark
that records this reference beside its figures lets a reader compare runs from different hosts: the reference is
`bench/decide_profile.py`'s median `handleInputRows` for one 500-log-dir cluster, the figure RESULTS has quoted
since the stateful step was first profiled.
"""
from __future__ import annotations

import json
import subprocess
import sys


def reference(batches: int = 100) -> dict[str, object]:
    """The stateful step's median ms per 500-log-dir batch, run now in a process of its own (None if it failed)."""
    done = subprocess.run([sys.executable, "-m", "bench.decide_profile", "--batches", str(batches), "--json"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return {"stateful_step_ms": None, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return {"stateful_step_ms": json.loads(done.stdout.strip().splitlines()[-1])["handleInputRows"]}
