"""The policy's Spark column expressions and its Python functions agree on every volume."""
from __future__ import annotations

from chispa import assert_column_equality
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from pyspark.sql import functions as F

from quota_pipeline.core.reference import policy
from quota_pipeline.core.config import Limit, Limits

TB = 10 ** 12
MAX = 2 ** 53  # byte counts beyond 9 PB are not volumes; beyond 2^53 int->double conversion is inexact

volumes = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, MAX)), st.integers(0, MAX)), min_size=1,
                   max_size=60).map(lambda vs: [(None if a is None else min(a, t), t) for a, t in vs])
limits = st.one_of(
    st.builds(lambda h: Limits(Limit("bytes", h)), st.integers(0, TB)),
    st.builds(lambda h: Limits(Limit("ratio", h)), st.floats(0, 1)),
    st.builds(lambda h, extra: Limits(Limit("bytes", h), Limit("bytes", h + extra)),
              st.integers(0, TB), st.integers(1, TB)),
    st.builds(lambda h, extra: Limits(Limit("ratio", h), Limit("ratio", min(1.0, h + extra))),
              st.floats(0, 0.9), st.floats(0.01, 0.5)),
    st.builds(lambda h, s: Limits(Limit("ratio", h), Limit("bytes", s)), st.floats(0, 1), st.integers(0, TB)),
)


@hsettings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(volumes, limits)
def test_spark_and_python_policy_agree(spark, vols, lim):
    expected = [(a, t, policy.volume_factor_py(a, t, lim), policy.violates_py(a, t, lim),
                 None if a is None else (0.0 if t == 0 else a / t)) for a, t in vols]
    df = spark.createDataFrame(expected, "available long, total long, py_factor double, py_violates boolean, "
                                         "py_ratio double")
    a, t = F.col("available"), F.col("total")
    both = df.select("*", policy.volume_factor_col(a, t, lim).alias("factor"),
                     policy.violates_col(a, t, lim).alias("violates"),
                     policy.available_ratio_col(a, t).alias("ratio"))
    assert_column_equality(both, "factor", "py_factor")
    assert_column_equality(both, "violates", "py_violates")
    assert_column_equality(both, "ratio", "py_ratio")
    for _, _, factor, violates, _ in expected:
        assert 0.0 <= factor <= 1.0
        assert (factor == 0.0) == violates or lim.soft is not None


def test_graded_policy_examples():
    lim = Limits(Limit("bytes", 100), Limit("bytes", 300))
    assert [policy.volume_factor_py(a, 1000, lim) for a in (0, 100, 150, 200, 300, 301)] == [
        0.0, 0.0, 0.25, 0.5, 1.0, 1.0]
    assert policy.volume_factor_py(None, None, lim) == 0.0  # offline


def test_ratio_limit_is_inclusive_like_strimzi():
    lim = Limits(Limit("ratio", 0.1))
    assert policy.violates_py(100, 1000, lim) and not policy.violates_py(101, 1000, lim)
