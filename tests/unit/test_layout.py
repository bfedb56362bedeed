"""The package's layout rules that a reader relies on: no function longer than a screen, and the decision code both
jobs share (core/compiled/) reads no files and knows no Spark: reading stays at the edges."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "quota_pipeline"
MAX_LINES = 60
SHARED = tuple(sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "core" / "compiled").glob("*.py")))
EDGE_MODULES = ("pyarrow.parquet", "pyarrow.dataset", "pyarrow.csv", "pyarrow.json", "pyspark")


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Every function (methods and nested ones too) under `root` longer than `limit` lines, decorators aside, as
    'path:line name (n lines)'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def edge_uses(path: Path) -> list[str]:
    """What in `path` reads files or needs Spark: imports of EDGE_MODULES and calls of open()."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [f"line {node.lineno}: import {n}" for n in names
                  if any(n == m or n.startswith(m + ".") for m in EDGE_MODULES)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            found.append(f"line {node.lineno}: open()")
    return found


def test_no_function_is_longer_than_60_lines():
    assert long_functions(PACKAGE) == []


def test_a_long_function_is_named_with_its_length(tmp_path):
    """The check itself can fail: a 61-line function is reported by file, line, name and length."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    def body(n: int) -> str:
        return "".join(f"    x{i} = {i}\n" for i in range(n))

    (pkg / "mod.py").write_text(f"import os\n\n\nclass A:\n    def short(self):\n        return 1\n\n\n"
                                f"def too_long():\n{body(59)}    return 0\n\n\ndef fits():\n{body(58)}    return 1\n")
    assert long_functions(pkg) == ["pkg/mod.py:9 too_long (61 lines)"]


def test_the_shared_decision_code_reads_no_files_and_needs_no_spark():
    for name in SHARED:
        assert edge_uses(PACKAGE / name) == [], name


def test_reading_a_file_in_shared_code_is_named(tmp_path):
    """The check itself can fail: a Parquet import and an open() are each named with their line."""
    path = tmp_path / "m.py"
    path.write_text("import numpy\nimport pyarrow.parquet as pq\n\n\ndef f(p):\n    return open(p).read()\n")
    assert edge_uses(path) == ["line 2: import pyarrow.parquet", "line 6: open()"]
