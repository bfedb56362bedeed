"""Which files a journal path holds: JSONL, Parquet grouped by schema, unreadable files; compacted tick files
left out. Driver side, no Spark."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from quota_pipeline.core import snapshot_rules as rules
from quota_pipeline.journal.layout import Sources
from quota_pipeline.journal.period_file import META_SOURCES

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")
PARQUET_SUFFIXES = (".parquet",)


class JournalInputError(Exception):
    """The input path holds nothing that can be read as a journal; the message says what to pass."""


@dataclass(frozen=True)
class Inputs:
    jsonl: tuple[str, ...]
    parquet: tuple[tuple[str, ...], ...]       # groups of files with one schema (each read in one pass)
    unreadable: tuple[tuple[str, str], ...] = ()  # (file, why): Parquet files whose footer cannot be read


def find_inputs(path: str) -> Inputs:
    """A file or a directory (searched recursively) of journal files, by extension.

    A journal as the streaming job leaves it is read whole and once: a compacted period file lists the tick
    files it replaced (journal/layout.py), and a tick file it lists (the leftover of an interrupted
    compaction) is not read again.
    """
    p = Path(path)
    if not p.exists():
        raise JournalInputError(f"{path}: no such file or directory; pass a journal file or a directory of them")
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith((".", "_")))
    jsonl = [f for f in files if f.name.endswith(JSONL_SUFFIXES)]
    parquet = [f for f in files if f.name.endswith(PARQUET_SUFFIXES)]
    if p.is_file() and not (jsonl or parquet):
        jsonl = [p]  # an explicitly named file is read as JSONL whatever its name
    groups, unreadable, replaced = _parquet_groups(parquet)
    jsonl = [f for f in jsonl if not _is_replaced(f, replaced)]
    if not (jsonl or groups or unreadable):
        raise JournalInputError(
            f"{path}: no journal files found (looked for {', '.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)})")
    return Inputs(tuple(map(str, jsonl)), groups, unreadable)


def _parquet_groups(files: list[Path]):
    """Readable Parquet files grouped by schema, the unreadable ones with why, and the tick files that
    compacted period files replaced, by cluster directory."""
    import pyarrow.parquet as pq

    by_schema: dict[str, list[str]] = {}
    unreadable: list[tuple[str, str]] = []
    replaced: dict[Path, list[Sources]] = {}
    for f in files:
        try:
            meta = pq.read_metadata(str(f))
            schema = meta.schema.to_arrow_schema().remove_metadata()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a broken file
            unreadable.append((str(f), f"unreadable Parquet file: {(str(exc).splitlines() or [repr(exc)])[0]}"))
            continue
        wrong = rules.parquet_schema_problem(schema)
        if wrong is not None:
            unreadable.append((str(f), wrong))
            continue
        raw = (meta.metadata or {}).get(META_SOURCES.encode())
        if raw is not None:
            try:
                sources = Sources.from_json(raw.decode())
            except ValueError as exc:
                unreadable.append((str(f), f"malformed {META_SOURCES} footer metadata ({exc}); remove the key or "
                                           "the file"))
                continue
            replaced.setdefault(f.parent.parent, []).append(sources)
        by_schema.setdefault(str(schema), []).append(str(f))
    groups = tuple(tuple(g) for g in by_schema.values())
    return groups, tuple(unreadable), {d: Sources.merge(s) for d, s in replaced.items()}


def _is_replaced(f: Path, replaced: dict[Path, Sources]) -> bool:
    sources = replaced.get(f.parent.parent)
    return sources is not None and f"{f.parent.name}/{f.name}" in sources
