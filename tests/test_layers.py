"""The package's layering, as quota_pipeline/__init__.py writes it down: no import from a layer above, no cycle."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import quota_pipeline

PACKAGE = Path(quota_pipeline.__file__).resolve().parent


def layers(doc: str) -> dict[str, int]:
    """Each part's layer from the package docstring's table: a line's first word and every `name:` after it."""
    table = doc.split("never from one above", 1)[1]
    found: dict[str, int] = {}
    for level, line in enumerate(re.findall(r"^    (\w.*)$", table, re.M)):
        for name in [line.split()[0], *re.findall(r"(?:[;(]\s*)(\w+):", line)]:
            found[name] = level
    return found


def imports(root: Path) -> set[tuple[str, str, str]]:
    """(importing part, imported part, where) for every import between the package's top-level parts."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        part = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module \
                else []
            for name in names:
                bits = name.split(".")
                if bits[0] == root.name and len(bits) > 1 and bits[1] != part and bits[1] != "__init__":
                    found.add((part, bits[1], f"{path.relative_to(root.parent)}:{node.lineno}"))
    return found


def violations(root: Path, table: dict[str, int]) -> list[str]:
    edges = imports(root)
    parts = {p for p, _, _ in edges} | {q for _, q, _ in edges}
    unplaced = sorted(p for p in parts if p not in table)
    upward = sorted(f"{where}: {src} imports {dst}, a layer above" for src, dst, where in edges
                    if src in table and dst in table and table[dst] > table[src])
    pairs = {(s, d) for s, d, _ in edges}
    cycles = sorted(f"{where}: {src} and {dst} import each other" for src, dst, where in edges
                    if (dst, src) in pairs)
    return [f"{p}: not in the layer table" for p in unplaced] + upward + cycles


def test_every_part_is_placed_and_imports_only_its_layer_and_below():
    assert violations(PACKAGE, layers(quota_pipeline.__doc__)) == []


def test_an_upward_import_and_a_cycle_are_named(tmp_path):
    """The check itself can fail: each offending import is named by file and line."""
    pkg = tmp_path / "pkg"
    for part in ("low", "high", "side"):
        (pkg / part).mkdir(parents=True)
    (pkg / "low" / "a.py").write_text("from pkg.high import b\n")
    (pkg / "high" / "b.py").write_text("import pkg.low.a\nfrom pkg.side import c\n")
    (pkg / "side" / "c.py").write_text("from pkg.high.b import x\n")
    table = {"low": 0, "high": 1, "side": 1}
    assert violations(pkg, table) == [
        "pkg/low/a.py:1: low imports high, a layer above",
        "pkg/high/b.py:1: high and low import each other", "pkg/high/b.py:2: high and side import each other",
        "pkg/low/a.py:1: low and high import each other", "pkg/side/c.py:1: side and high import each other"]


def test_the_table_is_read_from_the_package_docstring():
    table = layers(quota_pipeline.__doc__)
    assert table["core"] == table["resources"] == 0
    assert table["kafka"] == table["journal"] == table["session"] == 1
    assert table["cli"] == max(table.values())
