"""The snapshot rules (core/snapshot_rules.py) as vectorised checks over a chunk's flattened rows: per snapshot, the
first rule it breaks, as its code: its index in rules.FLATTENED_RULES (VALID: none).

Each check is found by its rule's key, so the table's order is the order of the codes; a rule is checked per row
(ROW_CHECKS), over a snapshot's rows (SNAPSHOT_CHECKS), or both (brokers: its lists' elements, and a SUCCESS must
have one). The time rules and the cluster id are checked before rows reach a chunk (replay/cluster_files.py's plan;
ClusterPass.mine), where rows are picked by them (BEFORE_THE_FRAME)."""
from __future__ import annotations

from functools import cached_property
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.core.compiled import arrays, row_order

RULES = rules.FLATTENED_RULES
CODE = {r.key: c for c, r in enumerate(RULES)}
RULE_REASONS = tuple(r.reason for r in RULES)
VALID = len(RULES)
C_TIME, C_RANGE = CODE["timestamp"], CODE["time_range"]
DUPLICATE = rules.DUPLICATE_SNAPSHOT.reason
BEFORE_THE_FRAME = ("cluster_id", "timestamp", "time_range")


class Grouped:
    """A chunk's rows grouped into snapshots: `order` maps sorted positions to rows (None: in order), `starts` are
    each snapshot's first sorted position, `snap_of` each sorted position's snapshot."""

    def __init__(self, table: pa.Table, order: np.ndarray | None, starts: np.ndarray, snap_of: np.ndarray,
                 is_volume: np.ndarray):
        self.table, self.order, self.starts, self.snap_of = table, order, starts, snap_of
        self.is_volume = arrays.in_order(is_volume, order)  # per sorted position

    def sorted(self, values: np.ndarray) -> np.ndarray:
        return arrays.in_order(values, self.order)

    def per_position(self, per_snapshot: np.ndarray) -> np.ndarray:
        return per_snapshot[self.snap_of]

    @cached_property
    def status_valid(self) -> np.ndarray:
        return self.sorted(arrays.is_valid(self.table.column("status")))

    @cached_property
    def status_codes(self) -> np.ndarray:
        return self.sorted(arrays.index_in(self.table.column("status"), rules.STATUSES))

    @cached_property
    def first_status(self) -> np.ndarray:
        """Per snapshot, its status (its first row that has one) as an index into rules.STATUSES; -1: none or
        another word."""
        return np.append(self.status_codes, -1)[arrays.first_where(self.status_valid, self.starts)]


def snapshot_codes(table: pa.Table, order: np.ndarray | None, starts: np.ndarray, snap_of: np.ndarray) -> np.ndarray:
    """Per snapshot (its rows at sorted positions starts[i] ..; `snap_of`: each sorted position's snapshot), the
    first rule it breaks (VALID: none)."""
    is_volume = _is_volume(table)
    code = np.full(table.num_rows, VALID, np.int8)  # rule codes: a few dozen
    for key, check in ROW_CHECKS.items():
        _mark(code, check(table, is_volume), CODE[key])
    code = arrays.in_order(code, order)
    grouped = Grouped(table, order, starts, snap_of, is_volume)
    for key, check in SNAPSHOT_CHECKS.items():
        _mark(code, check(grouped), CODE[key])
    return np.minimum.reduceat(code, starts)


def _mark(code: np.ndarray, cond: np.ndarray | None, c: int) -> None:
    """Rule c broken on the rows where `cond` (None: on none): a row keeps the first rule it breaks (the lowest
    code)."""
    if cond is None:
        return
    cond = np.asarray(cond, bool)
    if cond.any():  # most rules are broken by no row
        np.minimum(code, np.where(cond, code.dtype.type(c), code.dtype.type(VALID)), out=code)


def _is_volume(table: pa.Table) -> np.ndarray:
    """Per row: it reads a volume (a broker id or a log dir); a snapshot without volumes has one row without."""
    return arrays.is_valid(table.column("broker_id")) | arrays.is_valid(table.column("log_dir"))


# Per row of the table, in its order (`is_volume`: the rows that read a volume). Each looks row by row only when a
# whole-column count says a row may break it, else returns None.
def _bad_partitions(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    parts = table.column("top_partitions")
    flat = pc.list_flatten(parts)
    if not len(flat):
        return None
    broken = pc.or_kleene(pc.or_kleene(flat.is_null(), pc.struct_field(flat, "topic").is_null()), pc.or_kleene(
        pc.struct_field(flat, "partition").is_null(), pc.struct_field(flat, "size_bytes").is_null()))
    if not pc.any(broken).as_py():
        return None
    per_row = np.zeros(table.num_rows, bool)
    np.logical_or.at(per_row, pc.list_parent_indices(parts).to_numpy(), broken.to_numpy(zero_copy_only=False))
    return per_row


def _no_broker_id(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    bid = table.column("broker_id")
    return is_volume & arrays.is_null(bid) if bid.null_count else None


def _no_log_dir(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    no_dir = arrays.equal(table.column("log_dir"), "", null=True)
    return is_volume & no_dir if no_dir.any() else None


def _bytes_missing(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    tot, av, err = table.column("total_bytes"), table.column("available_bytes"), table.column("error")
    if not (tot.null_count or av.null_count):
        return None
    return is_volume & arrays.is_null(err) & (arrays.is_null(tot) | arrays.is_null(av))


def _bytes_negative(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    tot, av = table.column("total_bytes"), table.column("available_bytes")
    if min(arrays.min_or_zero(tot), arrays.min_or_zero(av)) >= 0:
        return None
    return is_volume & (arrays.to_numpy(pc.less(tot, 0).fill_null(False))
                        | arrays.to_numpy(pc.less(av, 0).fill_null(False)))


def _more_available(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    more = arrays.to_numpy(pc.greater(table.column("available_bytes"), table.column("total_bytes")).fill_null(False))
    return is_volume & more if more.any() else None


def _bad_topics(table: pa.Table, is_volume: np.ndarray) -> np.ndarray | None:
    topics = table.column("topics")
    return is_volume & arrays.null_elements(topics) if pc.list_flatten(topics).null_count else None


ROW_CHECKS: dict[str, Callable[[pa.Table, np.ndarray], np.ndarray | None]] = {
    "brokers": lambda table, _: arrays.null_elements(table.column("brokers")),
    "fenced_brokers": lambda table, _: arrays.null_elements(table.column("fenced_brokers")),
    "volumes": _bad_partitions,
    "broker_id": _no_broker_id,
    "log_dir": _no_log_dir,
    "bytes": _bytes_missing,
    "bytes_negative": _bytes_negative,
    "available_le_total": _more_available,
    "topics": _bad_topics,
}


# Per sorted position, over a snapshot's rows.
def _disagreeing(g: Grouped) -> np.ndarray:
    """Statuses of a snapshot must agree (nulls aside): its first non-null status is its status."""
    disagree = g.status_valid & (g.status_codes != g.per_position(g.first_status))
    return g.per_position(arrays.any_in_snapshot(disagree, g.starts))


def _success_without_brokers(g: Grouped) -> np.ndarray:
    success = g.first_status == rules.STATUSES.index("SUCCESS")
    has_brokers = arrays.any_in_snapshot(g.sorted(arrays.is_valid(g.table.column("brokers"))), g.starts)
    return g.per_position(success & ~has_brokers)


def _same_volume_twice(g: Grouped) -> np.ndarray | None:
    positions = np.flatnonzero(g.is_volume)
    broker = g.sorted(arrays.to_numpy(g.table.column("broker_id").fill_null(-1)).astype(np.int64, copy=False))
    log_dir = g.sorted(arrays.value_numbers(g.table.column("log_dir")))
    if not len(positions) or row_order.increasing_at(g.snap_of, broker, log_dir, positions):
        return None
    return g.per_position(arrays.any_in_snapshot(_duplicate_volumes(g.snap_of, broker, log_dir, positions), g.starts))


SNAPSHOT_CHECKS: dict[str, Callable[[Grouped], np.ndarray | None]] = {
    "disagreeing_rows": _disagreeing,
    "status": lambda g: g.per_position(g.first_status) < 0,
    "brokers": _success_without_brokers,
    "duplicate_volumes": _same_volume_twice,
}
_checked = set(ROW_CHECKS) | set(SNAPSHOT_CHECKS) | set(BEFORE_THE_FRAME)
assert _checked == set(CODE), f"rules without a vectorised check: {set(CODE) - _checked}"


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
