"""Which form of the decision kernel a replay without Spark runs: compiled by numba, or, for a journal too small to
be worth compiling, the very same functions as Python.

numba compiles the kernel on its first use after an install (10-15 s on 2 cores; then it is cached): longer than
its Python form takes to decide a few thousand snapshots. The functions are the same, only not compiled, so the
records are the same (tests/spark/test_replay_local.py holds the two forms to each other).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

from quota_pipeline.journal.inputs import Inputs

# Below this many volume rows a journal is decided by the kernel's Python form: about 50 µs a row (a second at
# the bound), where loading the compiled kernel from its cache takes about half a second and compiling it 10 s.
PYTHON_FORM_ROWS = 20_000
JSON_BYTES_PER_ROW = 150  # a volume row of a JSONL journal, about (the bundled example: 152)


def estimated_rows(inputs: Inputs) -> int:
    """About how many volume rows the journal holds: Parquet footers' counts, JSONL by size."""
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for group in inputs.parquet for f in group)
    return rows + sum(os.path.getsize(f) for f in inputs.jsonl) // JSON_BYTES_PER_ROW


def python_form(inputs: Inputs) -> bool:
    """Whether a replay of `inputs` without Spark decides with the kernel's Python form."""
    return estimated_rows(inputs) < PYTHON_FORM_ROWS


@contextmanager
def importing(python: bool) -> Iterator[None]:
    """Modules imported inside define the kernel in its Python form when `python` and the kernel is not defined
    in this process yet (once compiled functions are loaded, they serve: the records are the same)."""
    if not python or any(name.endswith(".kernel") and name.startswith("quota_pipeline.") for name in sys.modules):
        yield
        return
    from numba.core import config

    before = config.DISABLE_JIT
    config.DISABLE_JIT = True
    try:
        yield
    finally:
        config.DISABLE_JIT = before
