"""Showing strings from outside (record keys, cluster ids, log dirs, topics, messages) as text, never as markup.

Every command's terminal output and every log line goes through these: a control character (an ANSI escape, a
bell, a carriage return, a bidirectional override) is written as its escape (`\\x1b`, `\\u202e`), and rich
receives `Text` objects (or escaped markup), so `[link=...]` or `[/]` in a key is shown, not obeyed.
"""
from __future__ import annotations

import logging
from typing import Any


def escape(ch: str) -> str:
    """The one rule for a character of outside text (the broker callback's Printable.escape says the same): a
    printable one as it is, any other (str.isprintable: the controls, the format characters among them the
    bidirectional ones, the line and paragraph separators, every space but ' ', surrogates, private use and
    unassigned code points) as its escape, \\xNN below U+0100, \\uNNNN in the BMP, else \\UNNNNNNNN."""
    if ch.isprintable():
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(value: Any, keep_newlines: bool = False) -> str:
    """`value` as a string whose control characters are visible escapes (a backslash in it stays as it is)."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if keep_newlines and ch == "\n" else escape(ch) for ch in text)


def first_line(error: object) -> str:
    """An error as one line: its message's first (a Spark or Kafka error carries a stack trace after it), else its
    type's name."""
    message = str(error).strip()
    return message.splitlines()[0] if message else type(error).__name__


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

