"""The one grammar of a decision record's timestamps: RFC 3339, which the broker callback's Iso8601.instant reads too.

A record timestamp is `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)` and nothing else:

- `T` or `t`, `Z` or `z` (RFC 3339's grammar is case-insensitive); an offset is required (`-00:00` is UTC);
- the fraction has 1 to 9 digits (nanoseconds, the finest either reader holds) and is truncated to microseconds;
- the date and time exist: month 01-12, the month's days, hour 00-23, minute and second 00-59 (a leap second,
  `:60`, is refused: neither reader's clock can show one), offset hours 00-23 and minutes 00-59;
- the instant lies within 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z.

ISO-8601's other forms (week and ordinal dates, the basic format, fractional hours or minutes, a comma, no seconds,
no offset) are refused. tests/vectors/broker_quota_vectors.json ("records") holds both languages to this.
"""
from __future__ import annotations

import datetime as dt
import re

UTC = dt.timezone.utc
EXAMPLE = "2026-11-21T10:00:00.000Z"
_TIMESTAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                        r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))")


def parse_record_time(text: str) -> dt.datetime:
    """An aware UTC datetime of a record's timestamp (the grammar above); raises ValueError."""
    m = _TIMESTAMP.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp such as {EXAMPLE}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micros = int((m.group(7) or "").ljust(6, "0")[:6])
    offset = 0
    if m.group(8) is not None:
        hours, minutes = int(m.group(9)), int(m.group(10))
        if hours > 23 or minutes > 59:
            raise ValueError("the offset is not within -23:59 .. +23:59")
        offset = (hours * 60 + minutes) * (-1 if m.group(8) == "-" else 1)
    try:
        return dt.datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC) - dt.timedelta(minutes=offset)
    except ValueError:
        raise ValueError("no such date or time") from None
    except OverflowError:
        raise ValueError("the instant is outside the years 0001 to 9999") from None
