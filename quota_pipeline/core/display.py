"""Showing strings from outside (record keys, cluster ids, log dirs, topics, messages) as text, never as markup.

Every command's terminal output and every log line goes through these: a control character (an ANSI escape, a
bell, a carriage return, a bidirectional override) is written as its escape (`\\x1b`, `\\u202e`), and rich
receives `Text` objects (or escaped markup), so `[link=...]` or `[/]` in a key is shown, not obeyed.
"""
from __future__ import annotations

import logging
import re
from typing import Any

# C0 and C1 controls, DEL, and the bidirectional and zero-width format characters that reorder or hide text.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e"
                                  "\u2060-\u2069\ufeff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: Any, keep_newlines: bool = False) -> str:
    """`value` as a string whose control characters are visible escapes (a backslash in it stays as it is)."""
    return (_CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL).sub(_escape, str(value))


def text(value: Any, style: str = "") -> "Text":
    """A rich cell or line for an outside string: never parsed as markup, controls visible."""
    from rich.text import Text

    return Text(visible(value), style=style)


def markup(value: Any) -> str:
    """An outside string to put inside a markup string (`f"[bold]{markup(key)}[/]"`): escaped and visible."""
    from rich.markup import escape

    return escape(visible(value))


class VisibleFormatter(logging.Formatter):
    """Log lines with secrets masked and control characters visible: in the message (one record, one line, so a
    key holding a newline cannot forge another line) and in a traceback (`exc_info`), whose lines are kept."""

    def format(self, record: logging.LogRecord) -> str:
        from quota_pipeline.core.secrets import redact

        safe = logging.makeLogRecord(record.__dict__)
        safe.msg, safe.args = visible(redact(record.getMessage())), None
        safe.exc_text = None
        return super().format(safe)

    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        from quota_pipeline.core.secrets import redact

        return visible(redact(super().formatException(ei)), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return visible(super().formatStack(stack_info), keep_newlines=True)

