"""The package's layering, as quota_pipeline/__init__.py writes it down: no import from a layer above, no cycle; and
no import cycle among the harness's modules either."""
from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

import harness
import quota_pipeline

PACKAGE = Path(quota_pipeline.__file__).resolve().parent
HARNESS = Path(harness.__file__).resolve().parent


def layers(doc: str) -> dict[str, int]:
    """Each part's layer from the package docstring's table: a line's first word and every `name:` after it."""
    table = doc.split("never from one above", 1)[1]
    found: dict[str, int] = {}
    for level, line in enumerate(re.findall(r"^    (\w.*)$", table, re.M)):
        for name in [line.split()[0], *re.findall(r"(?:[;(]\s*)(\w+):", line)]:
            found[name] = level
    return found


def imported(node: ast.AST, package: list[str]) -> list[str]:
    """The absolute names an import statement in `package` (a dotted name's parts) brings in, relative ones resolved."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = package[:len(package) - node.level + 1] if node.level else []
    module = ".".join([*base, *([node.module] if node.module else [])])
    return [f"{module}.{a.name}" for a in node.names]


def imports(root: Path) -> set[tuple[str, str, str]]:
    """(importing part, imported part, where) for every import between the top-level parts (subpackages or modules) of
    the package at `root`, in a function's body too: a late import closes a cycle as well as an early one."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        part = rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for name in imported(node, [root.name, *rel[:-1]]):
                bits = name.split(".")
                if bits[0] == root.name and len(bits) > 1 and bits[1] != part and bits[1] != "__init__":
                    found.add((part, bits[1], f"{path.relative_to(root.parent)}:{node.lineno}"))
    return found


def path_back(graph: dict[str, set[str]], start: str, goal: str) -> list[str]:
    """A shortest chain of imports from `start` to `goal` ([start, ..., goal]), or [] if there is none."""
    came_from: dict[str, str] = {start: start}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        if here == goal:
            chain = [goal]
            while chain[-1] != start:
                chain.append(came_from[chain[-1]])
            return chain[::-1]
        for nxt in sorted(graph.get(here, ())):
            if nxt not in came_from:
                came_from[nxt] = here
                queue.append(nxt)
    return []


def cycles(edges: set[tuple[str, str, str]]) -> list[str]:
    """Every import that lies on a cycle of the import graph (its target leads back to its source), of any length,
    each named by file and line with the cycle it closes."""
    graph: dict[str, set[str]] = {}
    for src, dst, _ in edges:
        graph.setdefault(src, set()).add(dst)
    found = []
    for src, dst, where in edges:
        back = path_back(graph, dst, src)
        if back:
            found.append(f"{where}: {src} imports {dst}, a cycle: {' -> '.join([src, *back])}")
    return sorted(found)


def violations(root: Path, table: dict[str, int]) -> list[str]:
    edges = imports(root)
    parts = {p for p, _, _ in edges} | {q for _, q, _ in edges}
    unplaced = sorted(p for p in parts if p not in table)
    upward = sorted(f"{where}: {src} imports {dst}, a layer above" for src, dst, where in edges
                    if src in table and dst in table and table[dst] > table[src])
    return [f"{p}: not in the layer table" for p in unplaced] + upward + cycles(edges)


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
        "pkg/high/b.py:1: high imports low, a cycle: high -> low -> high",
        "pkg/high/b.py:2: high imports side, a cycle: high -> side -> high",
        "pkg/low/a.py:1: low imports high, a cycle: low -> high -> low",
        "pkg/side/c.py:1: side imports high, a cycle: side -> high -> side"]


def test_no_import_cycle_among_the_harness_modules():
    assert cycles(imports(HARNESS)) == []


def test_a_longer_cycle_through_late_and_relative_imports_is_named(tmp_path):
    """A flat folder like harness/: a -> b (in a function) -> c (relative) -> a; d only imports a, on no cycle."""
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "__init__.py").write_text("")
    (flat / "a.py").write_text("from flat import b\n")
    (flat / "b.py").write_text("def late():\n    import flat.c\n")
    (flat / "c.py").write_text("from .a import x\n")
    (flat / "d.py").write_text("from . import a\n")
    assert cycles(imports(flat)) == [
        "flat/a.py:1: a imports b, a cycle: a -> b -> c -> a",
        "flat/b.py:2: b imports c, a cycle: b -> c -> a -> b",
        "flat/c.py:1: c imports a, a cycle: c -> a -> b -> c"]


def test_the_table_is_read_from_the_package_docstring():
    table = layers(quota_pipeline.__doc__)
    assert table["core"] == table["resources"] == 0
    assert table["kafka"] == table["journal"] == table["session"] == 1
    assert table["cli"] == max(table.values())
