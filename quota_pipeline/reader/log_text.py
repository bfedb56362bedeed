"""How a reader's log lines show outside text and repeated warnings: quoted and cut, at most one line per interval."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from quota_pipeline.core.display import escape

SHOWN_TIME_CHARS = 40  # how much of a bad timestamp a log line shows: a timestamp is about 30 characters


def printable(text: str | None, limit: int = 120) -> str:
    """Outside text (a record key: anyone may write one) as one log line may show it: quoted, `"` and `\\` after a
    backslash, every other character by core.display.escape, cut after `limit` characters (the callback's
    Printable.quote)."""
    if text is None:
        return "none"
    out = []
    for ch in text[:limit]:
        out.append("\\" + ch if ch in '"\\' else escape(ch))
    more = f'... ({len(text) - limit} more characters)' if len(text) > limit else ""
    return '"' + "".join(out) + '"' + more


@dataclass
class LogLimiter:
    """When a repeated warning is logged: the first at once, then at most one line per `interval`, saying how many
    were not logged meanwhile (the Java callback's LogLimiter). Anyone who can write the decision topic can make a
    reader warn once per record, so no such warning may reach the log once per record. Not thread-safe: callers
    hold their own lock."""

    interval: dt.timedelta
    _last: dt.datetime | None = None
    _not_logged: int = 0

    def admit(self, now: dt.datetime) -> int | None:
        """None when the warning at `now` is not logged (counted); else how many were not logged since the last
        line. A clock that went back logs at once."""
        if self._last is not None and self._last <= now < self._last + self.interval:
            self._not_logged += 1
            return None
        unlogged, self._not_logged, self._last = self._not_logged, 0, now
        return unlogged


def unlogged(count: int) -> str:
    """", n of them not logged" for a count from LogLimiter.admit, or nothing."""
    return f", {count} of them not logged" if count else ""
