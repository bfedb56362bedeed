"""Every third-party module the package, the tests and the benchmarks import comes from a declared dependency.

A package installed by hand on the developer's machine once hid a missing dependency: CI was green while the suite
could not be collected in a fresh virtual environment. This test reads pyproject.toml (the source of truth, not the
installed metadata, which may be stale) and the imports of every file, and names what is missing.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL = {"quota_pipeline", "tests", "bench"}
# Imported by a library rather than by our code, but our behaviour depends on them being present.
IMPLICIT = {
    "quota_pipeline": {"rfc3339_validator": "jsonschema's date-time format check (resources.validator)"},
    "tests": {"xdist": "the README's test command (-n 2 --dist loadfile)"},
}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def declared() -> dict[str, set[str]]:
    """Distribution names allowed per tree: the package may use its runtime deps and its extras, tests and
    benchmarks also the dev extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    optional = set().union(*(v for k, v in extras.items() if k != "dev"))
    return {"quota_pipeline": runtime | optional, "tests": runtime | extras["dev"], "bench": runtime | extras["dev"]}


def imports(tree: str) -> dict[str, set[str]]:
    """Top-level third-party module -> the files under `tree` that import it."""
    local = set(LOCAL) | {p.stem for d in LOCAL for p in (ROOT / d).rglob("*.py")}
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / tree).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - local - set(sys.stdlib_module_names):
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def missing(tree: str) -> list[str]:
    providers = metadata.packages_distributions()
    allowed = declared()[tree]
    needed = imports(tree) | {m: {why} for m, why in IMPLICIT.get(tree, {}).items()}
    problems = []
    for module, users in sorted(needed.items()):
        dists = {_name(d) for d in providers.get(module, [])}
        if not dists:
            problems.append(f"{module} (used by {', '.join(sorted(users)[:3])}) is not installed: declare it")
        elif not dists & allowed:
            problems.append(f"{module} (used by {', '.join(sorted(users)[:3])}) comes from {', '.join(sorted(dists))},"
                            f" which {tree}/ does not declare")
    return problems


def test_the_package_imports_only_declared_dependencies():
    assert missing("quota_pipeline") == []


def test_tests_import_only_declared_dependencies():
    assert missing("tests") == []


def test_benchmarks_import_only_declared_dependencies():
    assert missing("bench") == []


def test_an_undeclared_import_is_named(tmp_path, monkeypatch):
    """The check itself can fail: numpy is installed (through pandas) but, taken out of the declarations, is named."""
    real = declared()
    monkeypatch.setattr(sys.modules[__name__], "declared",
                        lambda: {k: v - {"numpy"} for k, v in real.items()})
    problems = missing("quota_pipeline")
    assert any(p.startswith("numpy (used by quota_pipeline/") and "does not declare" in p for p in problems)


def test_ci_runs_the_readmes_commands_in_a_fresh_environment():
    """.ci/run installs and tests exactly as the README says, inside a virtual environment it has just made."""
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("python3 -m pip install -e '.[dev]' && "))
    ci = (ROOT / ".ci/run").read_text()
    venv = ci.index("python3 -m venv .ci/venv\n")
    assert "--system-site-packages" not in ci
    position = ci.index(". .ci/venv/bin/activate\n")
    assert venv < position
    for step in command.split(" && "):
        position = ci.index(step, position)
