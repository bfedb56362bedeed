"""The `journal_lines` Python data source: journal files split into numbered lines, for the Spark reader.

It only splits (gzip too), numbers lines and decodes them as UTF-8: a line that is not UTF-8 is passed on with
`line_problem` set (its text with the bad bytes as \\xNN, for the rejected file), never with bytes replaced.
Every field is parsed and checked by Spark SQL (spark_reader.py).
A split's `line` counts from its byte `offset`; LineNumbers turns that into the file's line number, for
rejected lines only, so that no split has to count the newlines before it.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from quota_pipeline.core.snapshot_rules import NOT_UTF8

SPLIT_BYTES = 64 * 1024 * 1024
OPEN_COST = 64 * 1024  # what opening one more file costs a task, in bytes read (Spark's openCostInBytes)
BATCH_LINES = 4096
BATCH_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class _Split(InputPartition):
    path: str
    start: int
    end: int  # -1: to the end (compressed files are never split)


@dataclass(frozen=True)
class _Pack(InputPartition):
    """One task's share: a large file's split, or many small files (a journal holds one file per tick)."""

    splits: tuple[_Split, ...]


def pack(sizes: list[tuple[str, int]], split_bytes: int = SPLIT_BYTES, parallelism: int = 1) -> list[_Pack]:
    """Files (path, size) as tasks of about the same weight: large files split at `split_bytes`, small files
    packed together as Spark packs file splits (each file weighs its size plus OPEN_COST), so that a directory
    of 86,400 tick files is tens of tasks, not 86,400; never fewer tasks than `parallelism` could use."""
    total = sum(size + OPEN_COST for _, size in sizes)
    target = min(split_bytes, max(OPEN_COST, -(-total // max(1, parallelism))))
    packs: list[_Pack] = []
    current: list[_Split] = []
    weight = 0
    for path, size in sizes:
        if path.endswith(".gz") or size <= split_bytes:
            pieces = [_Split(path, 0, -1)]
        else:
            pieces = [_Split(path, a, min(a + split_bytes, size)) for a in range(0, size, split_bytes)]
        for piece in pieces:
            current.append(piece)
            weight += (size if piece.end < 0 else piece.end - piece.start) + OPEN_COST
            if weight >= target:  # every pack but the last weighs at least `target`: at most `parallelism`
                packs.append(_Pack(tuple(current)))
                current, weight = [], 0
    if current:
        packs.append(_Pack(tuple(current)))
    return packs


class JournalLinesReader(DataSourceReader):
    def __init__(self, paths: list[str], split_bytes: int = SPLIT_BYTES, parallelism: int = 1) -> None:
        self.paths = paths
        self.split_bytes = split_bytes
        self.parallelism = parallelism

    def partitions(self) -> list[_Pack]:
        return pack([(p, os.path.getsize(p)) for p in self.paths], self.split_bytes, self.parallelism)

    def read(self, partition: _Pack) -> Iterator:
        import pyarrow as pa

        files: list[str] = []
        offsets: list[int] = []
        lines: list[int] = []
        texts: list[str] = []
        problems: list[str | None] = []
        size = 0

        def batch():
            return pa.RecordBatch.from_arrays(
                [pa.array(files), pa.array(offsets, pa.int64()), pa.array(lines, pa.int64()), pa.array(texts),
                 pa.array(problems, pa.string())],
                names=["file", "offset", "line", "text", "line_problem"])

        for split in partition.splits:
            for number, raw in _lines(split):
                text, problem = decode(raw)
                if not text.strip():
                    continue
                files.append(split.path)
                offsets.append(split.start)
                lines.append(number)
                texts.append(text)
                problems.append(problem)
                size += len(text)
                if len(texts) >= BATCH_LINES or size >= BATCH_BYTES:
                    yield batch()
                    files, offsets, lines, texts, problems, size = [], [], [], [], [], 0
        if texts:
            yield batch()


def decode(raw: bytes) -> tuple[str, str | None]:
    """A line's text and NOT_UTF8 when its bytes are not UTF-8 (then the text shows them as \\xNN)."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="backslashreplace"), NOT_UTF8


def _lines(split: _Split) -> Iterator[tuple[int, bytes]]:
    """(line number within the split, bytes without the line end) of the lines that start inside the split."""
    if split.end < 0:
        opener = gzip.open if split.path.endswith(".gz") else open
        with opener(split.path, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                yield number, raw.rstrip(b"\r\n")
        return
    with open(split.path, "rb") as fh:
        if split.start > 0:
            fh.seek(split.start - 1)
            if fh.read(1) != b"\n":
                fh.readline()  # the line that straddles the boundary belongs to the previous split
        position, number = fh.tell(), 1
        while position < split.end:
            raw = fh.readline()
            if not raw:
                break
            yield number, raw.rstrip(b"\r\n")
            number += 1
            position += len(raw)


class LineNumbers:
    """Line numbers of (file, split offset, line in split): counts newlines once per file, only when asked."""

    def __init__(self) -> None:
        self._newlines: dict[tuple[str, int], int] = {}  # newlines in [0, offset)
        self._first: dict[tuple[str, int], int] = {}     # lines before a split's first line

    def __call__(self, file: str, offset: int, line: int) -> int:
        if offset == 0:
            return line
        key = (file, offset)
        if key not in self._first:
            known = max((o for f, o in self._newlines if f == file and o < offset), default=0)
            count = self._newlines.get((file, known), 0)
            with open(file, "rb") as fh:
                fh.seek(known)
                remaining = offset - known
                while remaining > 0:
                    chunk = fh.read(min(remaining, 8 * 1024 * 1024))
                    count += chunk.count(b"\n")
                    remaining -= len(chunk)
                fh.seek(offset - 1)
                starts_a_line = fh.read(1) == b"\n"
            self._newlines[key] = count
            # Unless the split starts a line, its first line follows the one straddling the boundary.
            self._first[key] = count if starts_a_line else count + 1
        return self._first[key] + line


def rejections(rejected: DataFrame) -> Iterator[dict]:
    """Rejected rows in file order with their real line numbers (rejects are rare: read on the driver)."""
    number = LineNumbers()
    for r in rejected.orderBy("file", "offset", "line").toLocalIterator():
        reason = r.reason
        if r.first is not None:
            reason += f" (first at {r.first.file}:{number(r.first.file, r.first.offset, r.first.line)})"
        yield {"file": r.file, "line": number(r.file, r.offset, r.line), "reason": reason, "text": r.text}


class JournalLines(DataSource):
    """`spark.read.format("journal_lines").option("paths", json_list).load()`: (file, offset, line, text)."""

    @classmethod
    def name(cls) -> str:
        return "journal_lines"

    def schema(self) -> str:
        return "file string, offset long, line long, text string, line_problem string"

    def reader(self, schema: T.StructType) -> DataSourceReader:
        import json

        return JournalLinesReader(json.loads(self.options["paths"]),
                                  int(self.options.get("split_bytes", SPLIT_BYTES)),
                                  int(self.options.get("parallelism", 1)))
