"""Where the suite's CPU goes: per test, the CPU its pytest-xdist worker and every process below it used.

    python3 -m pytest -q -n 2 --dist loadfile -p tests.support.cpu_profile     # writes build/cpu-profile/*.jsonl
    python3 -m tests.support.cpu_profile build/cpu-profile                     # per tier, then the costliest files

Each worker moves itself into a cgroup of its own (cgroup v1's cpuacct controller, root only); the processes a test
starts (Kafka nodes, Spark's JVMs and Python workers, producers) are in it too, also those in sessions of their own,
which `/usr/bin/time` does not count once their parent is gone. Without that controller nothing is recorded and one
line says so. Not loaded by the README's command.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
OUT = Path(os.environ.get("CPU_PROFILE_DIR", "build/cpu-profile"))
_group: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _group
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    group = CPUACCT / f"quota-pipeline-tests-{worker}-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as exc:
        if worker in ("main", "gw0"):
            print(f"cpu_profile: no cgroup v1 cpuacct group ({exc.strerror}); nothing is recorded", file=sys.stderr)
        return
    _group = group
    OUT.mkdir(parents=True, exist_ok=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Back to the parent group, and the worker's own removed (when nothing it started is left in it)."""
    if _group is None:
        return
    try:
        (_group.parent / "cgroup.procs").write_text(str(os.getpid()))
        _group.rmdir()
    except OSError:
        pass


def _used_s() -> float:
    assert _group is not None
    return int((_group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if _group is None:
        yield
        return
    cpu, wall = _used_s(), time.time()
    yield  # setup, call and teardown: a module's fixtures count with its first and last test
    row = {"id": item.nodeid, "start": wall, "wall": time.time() - wall, "cpu": _used_s() - cpu}
    with (OUT / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")


def report(directory: Path, files: int = 25) -> str:
    """CPU and wall seconds per tier and for the costliest files, from the rows the plugin wrote."""
    rows = [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        entry = by_file[r["id"].split("::")[0]]
        entry[0] += r["cpu"]
        entry[1] += r["wall"]
        entry[2] += 1
    by_tier: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for name, (cpu, wall, count) in by_file.items():
        tier = by_tier[name.split("/")[1] if name.count("/") > 1 else "?"]
        tier[0] += cpu
        tier[1] += wall
        tier[2] += count
    lines = [f"{'tier':<10} {'CPU s':>8} {'wall s':>8} {'tests':>6}"]
    for tier, (cpu, wall, count) in sorted(by_tier.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{tier:<10} {cpu:8.0f} {wall:8.0f} {count:6d}")
    lines.append(f"{'all':<10} {sum(r['cpu'] for r in rows):8.0f} {sum(r['wall'] for r in rows):8.0f} {len(rows):6d}")
    lines.append("")
    for name, (cpu, wall, count) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:files]:
        lines.append(f"{cpu:8.1f} {wall:8.1f} {count:4d}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python3 -m tests.support.cpu_profile DIR (where `-p tests.support.cpu_profile` wrote)",
              file=sys.stderr)
        sys.exit(2)
    print(report(Path(sys.argv[1])))
