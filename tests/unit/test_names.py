"""Names with one meaning each in quota_pipeline/: a class name is defined in one module, a shared constant is assigned
in one module (the others import it), and no module outgrows a reader's sitting."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "quota_pipeline"
MAX_MODULE_LINES = 450
# Constants several parts read: each has one definition, imported wherever it is needed.
SHARED_CONSTANTS = ("OFFLINE_POLICIES", "STATUSES", "SOURCES", "REASONS", "INTERNAL_TOPICS")


def modules() -> list[tuple[str, ast.Module, int]]:
    """(path under the repository, parsed module, line count) of every module of the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        out.append((str(path.relative_to(PACKAGE.parent)), ast.parse(text), len(text.splitlines())))
    return out


def assigned(node: ast.stmt) -> list[str]:
    """The names a module-level statement assigns (a, b = ... included)."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    names = []
    for t in targets:
        names += [e.id for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(e, ast.Name)]
    return names


def defined_twice(found: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: paths for name, paths in sorted(found.items()) if len(paths) > 1}


def test_no_class_name_is_defined_in_two_modules():
    """`Plan`, `Settings`, `PartitionSize`: a name a reader meets in two modules must mean the same, so it is one
    definition; another concept gets its own name."""
    classes: dict[str, list[str]] = defaultdict(list)
    for path, tree, _ in modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(path)
    assert defined_twice(classes) == {}


def test_no_module_is_longer_than_450_lines():
    assert [f"{path} ({lines} lines)" for path, _, lines in modules() if lines > MAX_MODULE_LINES] == []


def test_each_shared_constant_is_assigned_in_one_module():
    """A second assignment is a second copy that can drift from the first (the sources spelled out in the metrics, the
    statuses in the reader): the others import the one definition."""
    found: dict[str, list[str]] = defaultdict(list)
    for path, tree, _ in modules():
        for node in tree.body:
            for name in assigned(node):
                if name in SHARED_CONSTANTS:
                    found[name].append(path)
    assert defined_twice(found) == {}
