"""The compiled decision imported from a zip (spark-submit's --py-files) is compiled once per host and package: an
executor of a restarted job, which finds the zip unpacked under a new application's directory, loads it instead of
compiling; a change to any module of its folder compiles it again."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import quota_pipeline

PACKAGE = Path(quota_pipeline.__file__).parent
RUN = """
import json
import numpy as np
from quota_pipeline.core.compiled import row_order
assert ".zip" in row_order.__file__, row_order.__file__
row_order.lex_sorted(*(np.zeros(2, np.int64) for _ in range(4)))
s = row_order.lex_sorted.stats
print(json.dumps([sum(s.cache_hits.values()), sum(s.cache_misses.values())]))
"""


def zipped(target: Path, edit: str | None = None) -> Path:
    target.parent.mkdir(parents=True)
    with zipfile.ZipFile(target, "w") as z:
        for f in sorted(PACKAGE.rglob("*.py")):
            text = f.read_text()
            if edit and f.name == "kernel.py":
                text += edit
            z.writestr(str(f.relative_to(PACKAGE.parent)), text)
    return target


def hits_and_misses(zip_path: Path, cache: Path) -> list[int]:
    # The zip first on the path, as spark-submit's --py-files puts it in an executor's Python workers.
    env = {**os.environ, "PYTHONPATH": str(zip_path), "NUMBA_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=600, env=env,
                          cwd=zip_path.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("\n")[-2])


def test_a_zipped_kernel_is_compiled_once_whatever_directory_the_zip_is_unpacked_in(tmp_path):
    cache = tmp_path / "numba-cache"
    first = zipped(tmp_path / "app-1" / "0" / "quota_pipeline.zip")
    assert hits_and_misses(first, cache) == [0, 1]  # compiled, and cached
    moved = tmp_path / "app-2" / "0" / "quota_pipeline.zip"  # the next application's copy: another path, mtime
    moved.parent.mkdir(parents=True)
    shutil.copyfile(first, moved)
    assert hits_and_misses(moved, cache) == [1, 0]
    # Another source beside the function's module (a new release; here kernel.py, whose loop inlines the modules
    # beside it) is compiled again, never served what the old one compiled.
    changed = zipped(tmp_path / "app-3" / "0" / "quota_pipeline.zip", edit="\n# another release\n")
    assert hits_and_misses(changed, cache) == [0, 1]
