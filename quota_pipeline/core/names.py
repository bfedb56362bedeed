"""Names that become paths (a cluster's journal directory, an enforce baseline file), and keeping what a command
writes or deletes inside its configured root.

The safe pattern is Kafka's topic alphabet without a leading dot: letters, digits, `.`, `_`, `-`, 1 to 249
characters, not starting with `.` (so never `.`, `..` or a hidden file), no `/`. A Kafka cluster id (base64url)
always matches it.
"""
from __future__ import annotations

import re
from pathlib import Path

from quota_pipeline.core.display import visible

SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}")
RULE = "letters, digits, '.', '_' and '-' only, 1 to 249 characters, not starting with '.'"


class UnsafePath(ValueError):
    """A name that cannot be a path component, or a path that leaves its root; the message says what to change."""


def problem(name: str) -> str | None:
    """Why `name` cannot name a directory or file, None when it can."""
    if SAFE_NAME.fullmatch(name):
        return None
    return f"'{visible(name)}' cannot name a directory: use {RULE}"


def checked(name: str, what: str) -> str:
    why = problem(name)
    if why is not None:
        raise UnsafePath(f"{what}: {why}")
    return name


def inside(root: Path, path: Path) -> Path:
    """`path`, made sure to stay inside `root` once both are resolved (a symlink pointing out of the root, on the
    way or at the end, is refused); returns the path as given (callers keep their own form)."""
    base = root.resolve()
    target = path.resolve()
    if target != base and base not in target.parents:
        raise UnsafePath(f"{visible(path)} leads outside {visible(base)} (a symlink?); refusing to write or delete "
                         "there: replace the link with a directory")
    return path
