"""The compiled order checks (core/compiled/row_order.py) say what numpy's sorts would, and a snapshot whose log dirs are not
in order is still checked for the same log dir twice."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
from hypothesis import given, settings as hsettings, strategies as st

from quota_pipeline.core.compiled import row_order
from tests.support.builders import GB, ok, settings, vol
from tests.unit.test_cluster_pass import replayed, write_flat

KEYS = st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2), st.integers(0, 2), st.integers(0, 2)), max_size=30)


@hsettings(max_examples=300, deadline=None)
@given(KEYS)
def test_lex_sorted_is_what_lexsort_leaves_in_place(rows):
    a, b, c, d = (np.array([r[i] for r in rows], np.int64) for i in range(4))
    expected = bool((np.lexsort((d, c, b, a)) == np.arange(len(rows))).all())
    assert row_order.lex_sorted(a, b, c, d) == expected


@hsettings(max_examples=300, deadline=None)
@given(KEYS, st.data())
def test_increasing_at_is_strictly_increasing_keys_over_the_rows_asked(rows, data):
    a, b, c, _ = (np.array([r[i] for r in rows], np.int64) for i in range(4))
    at = np.array(sorted(data.draw(st.sets(st.integers(0, max(len(rows) - 1, 0)), max_size=len(rows)))
                         if rows else []), np.int64)
    keys = [(a[i], b[i], c[i]) for i in at]
    assert row_order.increasing_at(a, b, c, at) == all(x < y for x, y in zip(keys, keys[1:]))


def test_a_snapshot_listing_its_log_dirs_out_of_order_is_decided_and_one_listing_a_dir_twice_is_rejected(tmp_path):
    out_of_order = ok(0, vol(2, 50 * GB, log_dir="/d1"), vol(1, 50 * GB, log_dir="/d1"), vol(1, 50 * GB))
    twice = ok(10, vol(1, 50 * GB), vol(2, 50 * GB), vol(1, 40 * GB))
    path = write_flat(tmp_path / "j.parquet", [out_of_order, twice])
    assert [r["broker_id"] for r in pq.read_table(path).to_pylist()] == [2, 1, 1, 1, 2, 1]  # as written
    got, rejected = replayed([path], ["c1"], settings())
    assert [r["active_log_dirs"] for r in got] == [3]
    assert [r["reason"] for r in rejected] == ["volumes lists the same (broker_id, log_dir) twice"]
