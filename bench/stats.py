"""The one percentile of the benchmarks and the campaign's checker: nearest rank, a value that occurred."""
from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], q: float, empty: float = float("nan")) -> float:
    """The q-th percentile (0 < q <= 100) by nearest rank: the smallest value with at least q % of the values at or
    below it (no interpolation, so a p99 is a delay that was measured); `empty` when there are no values."""
    if not values:
        return empty
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]
