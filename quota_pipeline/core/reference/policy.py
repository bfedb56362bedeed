"""The per-volume throttle policy, written once and evaluated as plain Python or as Spark columns.

Each definition below takes an `ops` backend: `PY` evaluates on Python numbers (the reference, cache.py; remedy's
need), `spark_ops()` builds Spark column expressions, and replay's report evaluates it over numpy arrays. The
arithmetic and the order of operations are the same in every backend, so they agree to the last bit;
tests/spark/test_policy.py holds the Python and Spark forms equal on random volumes. The compiled decision states the same
arithmetic in core/compiled/arithmetic.py.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from quota_pipeline.core.config import Limit, Limits


class Ops(Protocol):
    def lit(self, value: float) -> Any: ...
    def case(self, cond: Any, then: Callable[[], Any], otherwise: Callable[[], Any]) -> Any: ...
    def is_null(self, value: Any) -> Any: ...
    def any(self, *conds: Any) -> Any: ...
    def div(self, num: Any, den: Any) -> Any: ...
    def clamp01(self, value: Any) -> Any: ...


class _PythonOps:
    """Branches are thunks so that only the taken branch is evaluated, as in SQL CASE WHEN."""

    def lit(self, value: float) -> float:
        return value

    def case(self, cond: bool, then: Callable[[], Any], otherwise: Callable[[], Any]) -> Any:
        return then() if cond else otherwise()

    def is_null(self, value: Any) -> bool:
        return value is None

    def any(self, *conds: bool) -> bool:
        return any(conds)

    def div(self, num: float, den: float) -> float:
        return num / den

    def clamp01(self, value: float) -> float:
        return min(1.0, max(0.0, value))


class _SparkOps:
    def __init__(self) -> None:
        from pyspark.sql import functions as F

        self.F = F

    def lit(self, value: float) -> Any:
        return self.F.lit(value)

    def case(self, cond: Any, then: Callable[[], Any], otherwise: Callable[[], Any]) -> Any:
        return self.F.when(cond, then()).otherwise(otherwise())

    def is_null(self, value: Any) -> Any:
        return value.isNull()

    def any(self, *conds: Any) -> Any:
        out = conds[0]
        for c in conds[1:]:
            out = out | c
        return out

    def div(self, num: Any, den: Any) -> Any:
        # The branch guarding every division already excludes 0; CASE WHEN is lazy, so plain
        # division keeps Spark's double arithmetic identical to Python's.
        return num.cast("double") / den.cast("double")

    def clamp01(self, value: Any) -> Any:
        return self.F.least(self.F.lit(1.0), self.F.greatest(self.F.lit(0.0), value))


PY: Ops = _PythonOps()


def spark_ops() -> Ops:
    return _SparkOps()


def available_ratio(available: Any, total: Any, ops: Ops) -> Any:
    """available / total; a volume of total 0 counts as ratio 0 (DESIGN.md)."""
    return ops.case(total == 0, lambda: ops.lit(0.0), lambda: ops.div(available, total))


def limit_bytes(limit: Limit, total: Any, ops: Ops) -> Any:
    """A limit in bytes for one volume: ratio limits scale with the volume's size."""
    if limit.kind == "bytes":
        return ops.lit(float(limit.value))
    return total * limit.value


def violates(available: Any, total: Any, offline: Any, hard: Limit, ops: Ops) -> Any:
    """The hard-limit check (Strimzi's): available <= bytes, or available ratio <= ratio. Offline violates."""
    if hard.kind == "bytes":
        below = lambda: available <= hard.value  # noqa: E731
    else:
        below = lambda: available_ratio(available, total, ops) <= hard.value  # noqa: E731
    return ops.case(offline, lambda: ops.lit(True), below)


def volume_factor(available: Any, total: Any, offline: Any, limits: Limits, ops: Ops) -> Any:
    """0 at or below the hard limit, 1 above the soft limit (or without one), linear in between."""
    soft = limits.soft

    def graded() -> Any:
        if soft is None:
            return ops.lit(1.0)
        hard_b = limit_bytes(limits.hard, total, ops)
        soft_b = limit_bytes(soft, total, ops)
        return ops.case(
            available > soft_b,
            lambda: ops.lit(1.0),
            # available > hard here (not violating) and available <= soft, so soft > hard: no division by 0.
            # The clamp only guards float rounding between the ratio and the byte form of the hard limit.
            lambda: ops.clamp01(ops.div(available - hard_b, soft_b - hard_b)),
        )

    return ops.case(violates(available, total, offline, limits.hard, ops), lambda: ops.lit(0.0), graded)


def volume_factor_py(available: int | None, total: int | None, limits: Limits) -> float:
    """Python form for one reading; None bytes mean an offline log dir."""
    offline = available is None or total is None
    return float(volume_factor(available, total, offline, limits, PY))


def violates_py(available: int | None, total: int | None, limits: Limits) -> bool:
    offline = available is None or total is None
    return bool(violates(available, total, offline, limits.hard, PY))


def volume_factor_col(available: Any, total: Any, limits: Limits) -> Any:
    """Spark form: columns of available and total bytes; a null means an offline log dir."""
    ops = spark_ops()
    offline = available.isNull() | total.isNull()
    return volume_factor(available, total, offline, limits, ops)


def violates_col(available: Any, total: Any, limits: Limits) -> Any:
    ops = spark_ops()
    return violates(available, total, available.isNull() | total.isNull(), limits.hard, ops)


def available_ratio_col(available: Any, total: Any) -> Any:
    ops = spark_ops()
    return ops.case(available.isNull() | total.isNull(), lambda: ops.F.lit(None).cast("double"),
                    lambda: available_ratio(available, total, ops))
