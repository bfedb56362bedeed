"""The stateful step for a checkpoint written by transformWithStateInPandas: frames in, the rows form's step, frames out.

Spark holds a restarted query to the stateful operator that wrote its checkpoint, so a job whose checkpoint comes
from the pandas form (the job's form before it decided on rows) goes on in that form. The state is the same; only
the frames are turned into the rows the step reads and its rows back into a frame.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Iterator

import pandas as pd
from pyspark.sql import Row

from quota_pipeline.streaming.processor import OUTPUT_COLUMNS, DecisionProcessor
from quota_pipeline.streaming.source import REMOVED

OPERATOR = "transformWithStateInPandasExec"  # the name Spark records for it in the checkpoint's state metadata
LISTS = ("brokers", "fenced_brokers")


def _missing(value: Any) -> bool:
    """None, or the NaN pandas puts in an object column where a row has no value."""
    return value is None or (isinstance(value, float) and pd.isna(value))


def _plain(record: dict) -> dict:
    """A frame's row as the rows form gets it from Spark: Python ints, lists, bytes and datetimes."""
    out = dict(record)
    for name in LISTS:
        out[name] = None if _missing(record[name]) else [int(b) for b in record[name]]
    out["volumes"] = None if _missing(record["volumes"]) else bytes(record["volumes"])
    out["tick"] = int(record["tick"])
    observed = record["observed_at"]
    out["observed_at"] = observed.to_pydatetime() if isinstance(observed, pd.Timestamp) else observed
    return out


def _frame(rows: list[Row]) -> pd.DataFrame:
    """The step's rows as the frame Spark reads back: observed_at naive, as Spark reads it in the session's zone (UTC)."""
    records = [r.asDict() for r in rows]
    for r in records:
        if isinstance(r["observed_at"], dt.datetime):
            r["observed_at"] = r["observed_at"].astimezone(dt.timezone.utc).replace(tzinfo=None)
    removal = any(r["status"] == REMOVED for r in records)
    return pd.DataFrame(records, columns=list(OUTPUT_COLUMNS), dtype=object if removal else None)


class PandasFormProcessor(DecisionProcessor):
    """DecisionProcessor under transformWithStateInPandas."""

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        given = [Row(**_plain(r)) for frame in rows for r in frame.to_dict("records")]
        out = list(super().handleInputRows(key, iter(given), timerValues))
        if out:
            yield _frame(out)
