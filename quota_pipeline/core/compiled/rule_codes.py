"""The snapshot rules (core/snapshot_rules.py) as vectorised checks over a chunk's flattened rows: per snapshot, the
first rule it breaks, as a code (REASONS[code] is the rule's reason; VALID: none)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.core.compiled import arrays, row_order

# Rule codes in the order both other readers check them (rules.first_problem): the first broken one is reported.
DISAGREE = "rows of one snapshot disagree on status"
DUPLICATE = "duplicate snapshot of this cluster and observed_at"
REASONS = (DISAGREE,) + tuple(r.reason for r in rules.SNAPSHOT_RULES[1:]) + tuple(
    r.reason for r in rules.VOLUME_RULES) + (rules.DUPLICATE_VOLUMES.reason,)
C_TIME, C_RANGE, C_STATUS, C_BROKERS, C_FENCED, C_PARTS = 2, 3, 4, 5, 6, 7  # rules.SNAPSHOT_RULES' indexes
C_VOLUME = len(rules.SNAPSHOT_RULES)
C_DUP_VOLUMES = len(REASONS) - 1
VALID = len(REASONS)


def snapshot_codes(table: pa.Table, order: np.ndarray | None, starts: np.ndarray, snap_of: np.ndarray) -> np.ndarray:
    """Per snapshot (its rows at sorted positions starts[i] ..; `snap_of`: each sorted position's snapshot), the
    first rule it breaks (VALID: none)."""
    is_volume = _is_volume(table)
    code = arrays.in_order(_row_codes(table, is_volume), order)
    _snapshot_codes(table, order, starts, snap_of, code, arrays.in_order(is_volume, order))
    return np.minimum.reduceat(code, starts)


def _mark(code: np.ndarray, cond, c: int) -> None:
    """Rule c broken on the rows where `cond`: a row keeps the first rule it breaks (the lowest code)."""
    cond = np.asarray(cond, bool)
    if cond.any():  # most rules are broken by no row
        np.minimum(code, np.where(cond, code.dtype.type(c), code.dtype.type(VALID)), out=code)


def _row_codes(table: pa.Table, is_volume: np.ndarray) -> np.ndarray:
    """Per row of the table, in its order, the first rule the row breaks on its own (VALID: none): the broker lists'
    and top partitions' null elements (rules.SNAPSHOT_RULES), the volume rules (rules.VOLUME_RULES) on the rows
    that read a volume (`is_volume`, per row)."""
    code = np.full(table.num_rows, VALID, np.int8)  # rule codes: a few dozen
    _mark(code, arrays.null_elements(table.column("brokers")), C_BROKERS)
    _mark(code, arrays.null_elements(table.column("fenced_brokers")), C_FENCED)
    parts = table.column("top_partitions")
    flat = pc.list_flatten(parts)
    if len(flat):
        broken = pc.or_kleene(pc.or_kleene(flat.is_null(), pc.struct_field(flat, "topic").is_null()), pc.or_kleene(
            pc.struct_field(flat, "partition").is_null(), pc.struct_field(flat, "size_bytes").is_null()))
        if pc.any(broken).as_py():
            per_row = np.zeros(table.num_rows, bool)
            np.logical_or.at(per_row, pc.list_parent_indices(parts).to_numpy(),
                             broken.to_numpy(zero_copy_only=False))
            _mark(code, per_row, C_PARTS)
    bid, ldir = table.column("broker_id"), table.column("log_dir")
    tot, av, err = table.column("total_bytes"), table.column("available_bytes"), table.column("error")
    # Each rule is looked at row by row only when a whole-column count says a row may break it.
    if bid.null_count:
        _mark(code, is_volume & arrays.is_null(bid), C_VOLUME)
    no_dir = arrays.equal(ldir, "", null=True)
    if no_dir.any():
        _mark(code, is_volume & no_dir, C_VOLUME + 1)
    if tot.null_count or av.null_count:
        _mark(code, is_volume & arrays.is_null(err) & (arrays.is_null(tot) | arrays.is_null(av)), C_VOLUME + 2)
    if min(arrays.min_or_zero(tot), arrays.min_or_zero(av)) < 0:
        _mark(code, is_volume & (arrays.to_numpy(pc.less(tot, 0).fill_null(False)) | arrays.to_numpy(pc.less(av, 0).fill_null(False))),
              C_VOLUME + 3)
    more = arrays.to_numpy(pc.greater(av, tot).fill_null(False))
    if more.any():
        _mark(code, is_volume & more, C_VOLUME + 4)
    topics = table.column("topics")
    if pc.list_flatten(topics).null_count:
        _mark(code, is_volume & arrays.null_elements(topics), C_VOLUME + 5)
    return code


def _is_volume(table: pa.Table) -> np.ndarray:
    """Per row: it reads a volume (a broker id or a log dir); a snapshot without volumes has one row without."""
    return arrays.is_valid(table.column("broker_id")) | arrays.is_valid(table.column("log_dir"))


def _snapshot_codes(table: pa.Table, order: np.ndarray | None, starts: np.ndarray, snap_of: np.ndarray,
                    code: np.ndarray, is_volume: np.ndarray) -> None:
    """The rules over a snapshot's rows marked on `code` (per sorted position): statuses that disagree or are
    missing, a successful poll without brokers, the same log dir twice among the volume rows (`is_volume`, per
    sorted position)."""
    status = table.column("status")
    st_valid = arrays.in_order(arrays.is_valid(status), order)
    # Statuses of a snapshot must agree (nulls aside): its first non-null status is its status.
    codes = arrays.in_order(arrays.index_in(status, rules.STATUSES), order)
    first = arrays.first_where(st_valid, starts)
    first_status = np.append(codes, -1)[first]  # -1: no row of the snapshot has a status
    disagree = st_valid & (codes != first_status[snap_of])
    _mark(code, arrays.any_in_snapshot(disagree, starts)[snap_of], 0)
    _mark(code, first_status[snap_of] < 0, C_STATUS)
    success = first_status == rules.STATUSES.index("SUCCESS")
    has_brokers = arrays.any_in_snapshot(arrays.in_order(arrays.is_valid(table.column("brokers")), order), starts)
    _mark(code, (success & ~has_brokers)[snap_of], C_BROKERS)
    positions = np.flatnonzero(is_volume)
    broker = arrays.in_order(arrays.to_numpy(table.column("broker_id").fill_null(-1)).astype(np.int64, copy=False), order)
    log_dir = arrays.in_order(arrays.value_numbers(table.column("log_dir")), order)
    if len(positions) and not row_order.increasing_at(snap_of, broker, log_dir, positions):
        dup = _duplicate_volumes(snap_of, broker, log_dir, positions)
        _mark(code, arrays.any_in_snapshot(dup, starts)[snap_of], C_DUP_VOLUMES)


def _duplicate_volumes(snap_of: np.ndarray, broker: np.ndarray, log_dir: np.ndarray,
                       positions: np.ndarray) -> np.ndarray:
    """Per sorted position: among the volume rows at `positions`, the same (snapshot, broker, log dir) came
    earlier (per sorted position: its snapshot, broker id and log dir number)."""
    s, b, d = snap_of[positions], broker[positions], log_dir[positions]
    by_key = np.lexsort((d, b, s))  # stable: of equal keys, the earliest position first
    same = (s[by_key][1:] == s[by_key][:-1]) & (b[by_key][1:] == b[by_key][:-1]) & (d[by_key][1:] == d[by_key][:-1])
    dup = np.zeros(len(snap_of), bool)
    dup[positions[by_key][1:][same]] = True
    return dup
