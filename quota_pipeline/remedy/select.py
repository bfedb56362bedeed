"""The fewest bytes: the subset of replicas whose sizes add up to at least what a dir needs with the least total."""
from __future__ import annotations

from typing import Sequence

# Branch and bound visits at most this many nodes per dir; past it the best subset found so far is taken (a dir
# with a few hundred small replicas), which is still at least the bytes needed.
BUDGET = 200_000
MAX_ITEMS = 400


def fewest_bytes(sizes: Sequence[int], required: float, budget: int = BUDGET) -> tuple[int, ...] | None:
    """Indices of a subset of `sizes` with sum >= `required` and the least such sum (exact within `budget`; ties: the
    fewest replicas, then the largest first), None when all of them together fall short. `required` <= 0: ()."""
    if required <= 0:
        return ()
    order = _considered(sizes, required)
    values = [sizes[i] for i in order]
    if sum(values) < required:
        return None
    suffix = [0] * (len(values) + 1)
    for i in range(len(values) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + values[i]
    best: list = [_greedy(values, required)]
    visits = [0]

    def better(total: int, count: int) -> bool:
        b_total, b_count = sum(values[i] for i in best[0]), len(best[0])
        return (total, count) < (b_total, b_count)

    def dfs(i: int, total: int, chosen: list[int]) -> None:
        visits[0] += 1
        if visits[0] > budget:
            return
        if total >= required:
            if better(total, len(chosen)):
                best[0] = tuple(chosen)
            return
        if i == len(values) or total + suffix[i] < required or not better(total, len(chosen)):
            return
        chosen.append(i)
        dfs(i + 1, total + values[i], chosen)
        chosen.pop()
        dfs(i + 1, total, chosen)

    dfs(0, 0, [])
    return tuple(sorted(order[i] for i in best[0]))


def _considered(sizes: Sequence[int], required: float) -> list[int]:
    """Indices, largest first: of the values that cover `required` alone only the smallest can be in the best subset;
    past MAX_ITEMS the smallest of the others are left out (the search's depth is its length)."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    covering = [i for i in order if sizes[i] >= required]
    rest = [i for i in order if sizes[i] < required][:MAX_ITEMS]
    return covering[-1:] + rest


def _greedy(values: Sequence[int], required: float) -> tuple[int, ...]:
    """A first answer to beat: the smallest single value that covers it, else the largest ones until it is covered."""
    single = [i for i, v in enumerate(values) if v >= required]
    if single:
        return (single[-1],)
    chosen, total = [], 0
    for i, v in enumerate(values):
        chosen.append(i)
        total += v
        if total >= required:
            break
    return tuple(chosen)
