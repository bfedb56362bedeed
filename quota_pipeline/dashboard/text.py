"""How the page and `tail` write numbers: factors, bytes, ratios, durations, limits."""
from __future__ import annotations

import datetime as dt
from typing import Any

from quota_pipeline.core.display import visible
from quota_pipeline.core.model import PredictiveThrottle

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def factor(value: float | None) -> str:
    """0 and 1 as such, else two decimals: "0", "0.42", "1"."""
    if value is None:
        return "-"
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def size(value: float | None) -> str:
    if value is None:
        return "-"
    sign, rest = ("-", -value) if value < 0 else ("", value)
    for unit in _UNITS:
        if rest < 1024 or unit == _UNITS[-1]:
            return f"{sign}{rest:.0f} {unit}" if unit == "B" else f"{sign}{rest:.1f} {unit}"
        rest /= 1024
    raise AssertionError("unreachable")


def rate(value: float | None) -> str:
    return "-" if value is None else f"{size(value)}/s"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def duration(seconds: float | None) -> str:
    """Two units at most: "45 s", "3 min 20 s", "2 h 5 min", "3 d 4 h"."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    for size_, name, sub, sub_name in ((86400, "d", 3600, "h"), (3600, "h", 60, "min"), (60, "min", 1, "s")):
        if s >= size_:
            rest = (s % size_) // sub
            return f"{s // size_} {name}" + (f" {rest} {sub_name}" if rest else "")
    return f"{s} s"


def predictive(p: PredictiveThrottle) -> str:
    """Why a predictive throttle is in force, in one line (the job's log, `tail`, the page's terminal view):
    "broker 2 /data/x reaches the hard limit in 14 min at the current fill (horizon 30 min)"; the log dir is outside
    text, its control characters shown escaped."""
    return (f"broker {p.broker_id} {visible(p.log_dir)} reaches the hard limit in {duration(p.eta_seconds)} at the "
            f"current fill (horizon {duration(p.horizon_seconds)})")


def clock_time(t: dt.datetime | None) -> str:
    return "-" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def limit_value(entry: dict[str, Any] | None) -> str:
    """{"type": "min.available.ratio", "value": 0.05} -> "5.0% available"."""
    if not entry:
        return "-"
    try:
        if entry.get("type") == "min.available.ratio":
            return f"{percent(float(entry['value']))} available"
        return f"{size(float(entry['value']))} available"
    except (AttributeError, KeyError, TypeError, ValueError):  # the record's limit is shown, not validated
        return f"unreadable ({entry!r})"


def limits(limit: dict[str, Any]) -> str:
    text = f"hard {limit_value(limit.get('hard'))}"
    if limit.get("soft"):
        text += f", soft {limit_value(limit.get('soft'))}"
    return text


def brokers(ids: tuple[int, ...] | list[int]) -> str:
    return ", ".join(str(b) for b in ids) if ids else "none"
