"""The repository's tree says what each Python file is: test files in tests/, what only they use in tests/support/,
what starts Kafka, S3Proxy, Spark clusters, producers and browsers in harness/, benchmarks in bench/. Tests and
benchmarks import all of it as ordinary modules from the repository's root, so no file edits sys.path (an edit
hid which copy of a module ran), and the shipped package depends on none of it."""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BESIDE = ("bench", "tests", "harness")  # imported from the root, never shipped
# An edit of the module search path, in code or in a code string run by a subprocess.
PATH_EDIT = re.compile(r"\bsys\s*\.\s*path\s*(?:\.\s*(?:insert|append|extend)\b|\+=|\[[^\]]*\]\s*=)")


def path_edits(roots: list[Path]) -> list[str]:
    """'path:line' of every edit of sys.path in the .py files under `roots`."""
    return [f"{path.relative_to(root.parent)}:{n}" for root in roots for path in sorted(root.rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if PATH_EDIT.search(line)]


def imports_of(root: Path, tops: set[str]) -> list[str]:
    """'path:line module' of every import under `root` of a module in one of the top-level packages `tops`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            found += [f"{path.relative_to(root.parent)}:{node.lineno} {n}" for n in names if n.split(".")[0] in tops]
    return found


def test_no_file_beside_the_package_edits_sys_path():
    assert path_edits([ROOT / d for d in BESIDE]) == []


def test_an_edit_of_sys_path_is_named(tmp_path):
    """The check itself can fail: an insert, an append and one inside a code string are each named."""
    root = tmp_path / "bench"
    root.mkdir()
    edit = "sys.path."  # spelled apart, so that this file holds no edit itself
    (root / "a.py").write_text(f"import sys\n{edit}insert(0, '..')\n")
    (root / "b.py").write_text(f"import sys\n\n{edit}append('x')\ncode = 'import sys; {edit}insert(0, z)'\n")
    (root / "c.py").write_text("print(sys.path)\npaths = list(sys.path)\n")
    assert path_edits([root]) == ["bench/a.py:2", "bench/b.py:3", "bench/b.py:4"]


def test_the_package_imports_nothing_from_beside_it():
    assert imports_of(ROOT / "quota_pipeline", set(BESIDE)) == []


def test_the_harness_imports_no_test_and_no_benchmark():
    """Tests and benchmarks use the harness, not the other way round."""
    assert imports_of(ROOT / "harness", {"tests", "bench"}) == []


def test_tests_holds_test_files_and_tests_support_their_helpers():
    top = sorted(p.name for p in (ROOT / "tests").glob("*.py") if p.name != "conftest.py")
    assert [n for n in top if not n.startswith("test_")] == []
    assert sorted(p.name for p in (ROOT / "tests" / "support").glob("test_*.py")) == []


def test_the_wheel_takes_the_package_only():
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert found["include"] == ["quota_pipeline*"]


def test_benchmarks_say_to_run_them_as_modules():
    """A benchmark run as `python3 bench/x.py` would not find the harness: each usage line says `python3 -m bench.x`."""
    as_scripts = [f"{p.name}: {line.strip()}" for p in sorted((ROOT / "bench").glob("*.py"))
                  for line in (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "").splitlines()
                  if re.search(r"\bpython3? (?:-\S+ )*bench/", line)]
    assert as_scripts == []
