"""Order checks over a chunk's rows for the input frame (core/compiled/frame.py), compiled by numba: one loop each,
without the GIL and without numpy's whole-column temporaries. Each says whether the rows are already in order, the
case of a journal written in time order; when they are not, the frame sorts."""
from __future__ import annotations

import numba
import numpy as np

from quota_pipeline.core.compiled import numba_cache

numba_cache.install()  # before the functions below are compiled


@numba.njit(cache=True, nogil=True)
def lex_sorted(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> bool:
    """The rows are in (a, b, c, d) order, ties allowed: np.lexsort((d, c, b, a)) would leave them as they are."""
    for i in range(1, len(a)):
        if a[i] != a[i - 1]:
            if a[i] < a[i - 1]:
                return False
        elif b[i] != b[i - 1]:
            if b[i] < b[i - 1]:
                return False
        elif c[i] != c[i - 1]:
            if c[i] < c[i - 1]:
                return False
        elif d[i] < d[i - 1]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def increasing_at(a: np.ndarray, b: np.ndarray, c: np.ndarray, rows: np.ndarray) -> bool:
    """(a, b, c) strictly increases over `rows`: no two of them are equal, as when a journal lists each snapshot's
    log dirs in order."""
    for k in range(1, len(rows)):
        i, j = rows[k], rows[k - 1]
        if a[i] != a[j]:
            if a[i] < a[j]:
                return False
        elif b[i] != b[j]:
            if b[i] < b[j]:
                return False
        elif c[i] <= c[j]:
            return False
    return True
