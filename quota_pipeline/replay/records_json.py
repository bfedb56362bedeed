"""Decision records as JSON lines without Spark, in the text Spark's JSON writer gives them (replay's .jsonl OUT).

Field order of the record schema, null fields written, timestamps as model.format_time strings, doubles as Java
prints them (3.758096384E10, 1.0E-4; NaN and infinities quoted), strings escaped as Jackson escapes them.
"""
from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quota_pipeline.core.model import format_time

_ESCAPES = {i: f"\\u{i:04X}" for i in range(0x20)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\b"): "\\b", ord("\t"): "\\t", ord("\n"): "\\n",
                 ord("\f"): "\\f", ord("\r"): "\\r"})


def java_double(x: float) -> str:
    """A double as Java's Double.toString writes it (shortest digits), NaN and infinities as Jackson quotes them."""
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits))
    stripped = text.rstrip("0")
    exponent += len(text) - len(stripped)
    point = len(stripped) + exponent  # the value is 0.<stripped> x 10^point
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            out = "0." + "0" * -point + stripped
        elif point >= len(stripped):
            out = stripped + "0" * (point - len(stripped)) + ".0"
        else:
            out = stripped[:point] + "." + stripped[point:]
    else:
        out = f"{stripped[0]}.{stripped[1:] or '0'}E{point - 1}"
    return ("-" if sign else "") + out


def dumps(value: Any) -> str:
    """One value as Spark's JSON writer writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double(value)
    if isinstance(value, str):
        return '"' + value.translate(_ESCAPES) + '"'
    if isinstance(value, dt.datetime):
        return '"' + format_time(value) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(f"{dumps(k)}:{dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _batches(parts: list[Path], merged: bool) -> Iterable[pa.RecordBatch]:
    """The parts' records sorted by cluster then observed_at. Each part is one cluster's records in time order, the
    parts in cluster order (replay/job.plan_tasks); `merged` (one cluster name given to every record): all parts
    sorted by time together."""
    if not merged:
        for part in parts:
            yield from pq.ParquetFile(str(part)).iter_batches(batch_size=8192)
        return
    table = pa.concat_tables([pq.read_table(str(p)) for p in parts]) if parts else None
    if table is not None and table.num_rows:
        yield from table.take(pc.sort_indices(table, [("observed_at", "ascending")])).to_batches(8192)


def write(parts: list[Path], target: Path, merged: bool = False) -> None:
    """The records of `parts` (replay's part files) into `target`, one JSON line each."""
    with target.open("w", encoding="utf-8", newline="\n") as out:
        for batch in _batches(parts, merged):
            out.writelines(dumps(row) + "\n" for row in batch.to_pylist())
