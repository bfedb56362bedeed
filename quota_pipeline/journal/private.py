"""The journal's files are the job user's alone: directories 0700, files 0600, whatever the umask.

Whoever can write the journal can plant or alter snapshots (replay and compaction read them; a re-run after a crash
takes its ticks from them); whoever can read it sees the fleet's disks and topics. The mode bits say so in the
filesystem; an existing directory keeps the mode it has (an operator's choice, e.g. a group that reads it).
"""
from __future__ import annotations

import os
from pathlib import Path

from quota_pipeline.journal import layout

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dirs(path: Path) -> None:
    """`path` and its missing parents, each created 0700 (an existing directory keeps its mode)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, 0600, through a fsynced temporary file (the rename is atomic)."""
    tmp = path.with_name(f"{layout.WRITER_TMP_PREFIX}{path.name}-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), FILE_MODE)  # a leftover of a killed writer with this pid may have another mode
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Makes a rename or a new name in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
