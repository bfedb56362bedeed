"""The repository's tree says what each Python file is: test files in tests/, what only they use in tests/support/,
what starts Kafka, S3Proxy, Spark clusters, producers and browsers in harness/, benchmarks (and their recorded
results) in bench/, the fault campaign and its checker in verify/. Tests, benchmarks and the campaign import all of it
as ordinary modules from the repository's root, so no file edits sys.path (an edit hid which copy of a module ran),
and the shipped package depends on none of it."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.tiers import TIERS, misplaced, tier_of

ROOT = Path(__file__).resolve().parents[2]
BESIDE = ("bench", "tests", "harness", "verify")  # imported from the root, never shipped
TOOLS = ("bench", "verify")  # run as modules from the root: `python3 -m bench.x`, `python3 -m verify.campaign`
# One benchmark or campaign module's import in CPU seconds, its libraries' first import included: CPU, not the clock,
# so that the cores' other work (the suite's other workers) does not count.
IMPORT_BUDGET_S = 5.0
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


def test_the_harness_imports_no_test_no_benchmark_and_no_campaign():
    """Tests, benchmarks and the campaign use the harness, not the other way round."""
    assert imports_of(ROOT / "harness", {"tests", "bench", "verify"}) == []


def test_tests_holds_test_files_by_tier_and_tests_support_their_helpers():
    """Every test file is in a tier's folder (tests/unit, tests/spark, tests/realkafka, tests/long) and nothing else is;
    tests/ itself holds only the shared fixtures."""
    assert sorted(p.name for p in (ROOT / "tests").glob("*.py")) == ["__init__.py", "conftest.py"]
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {*TIERS, "support", "java", "vectors"}, folders
    for tier in TIERS:
        names = sorted(p.name for p in (ROOT / "tests" / tier).glob("*.py"))
        assert [n for n in names if not n.startswith("test_") and n != "__init__.py"] == [], tier
        assert [d.name for d in (ROOT / "tests" / tier).iterdir() if d.is_dir() and d.name != "__pycache__"] == []
    assert sorted(p.name for p in (ROOT / "tests" / "support").rglob("test_*.py")) == []


def test_the_tiers_refuse_a_test_that_needs_more_than_its_folder_allows():
    """The collection check itself can fail: a unit test on the SparkSession or on real Kafka, a Spark test on real
    Kafka, a file outside the tiers."""
    tests = ROOT / "tests"
    assert tier_of(tests / "unit" / "test_x.py", tests) == "unit"
    assert tier_of(tests / "test_x.py", tests) is None and tier_of(tests / "support" / "x.py", tests) is None
    assert misplaced("unit", {"tmp_path", "spark"}) == "it uses the SparkSession: move it to tests/spark/"
    assert "move it to tests/realkafka/" in misplaced("spark", {"spark", "real_kafka"})
    assert "move it to tests/realkafka/" in misplaced("unit", {"callback_jar"})
    assert "tests/{long,realkafka,spark,unit}/" in misplaced(None, set())
    assert misplaced("long", {"spark", "real_kafka3"}) is misplaced("realkafka", {"spark"}) is None


def test_the_wheel_takes_the_package_only():
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert found["include"] == ["quota_pipeline*"]


def test_benchmarks_and_the_campaign_say_to_run_them_as_modules():
    """A script run as `python3 bench/x.py` would not find the harness: each usage line says `python3 -m bench.x`."""
    as_scripts = [f"{p.parent.name}/{p.name}: {line.strip()}" for p in tools(ROOT)
                  for line in (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "").splitlines()
                  if re.search(r"\bpython3? (?:-\S+ )*(?:bench|verify)/", line)]
    assert as_scripts == []


def runnable(root: Path) -> list[str]:
    """The benchmarks under `root`/bench: each module with a main guard (the others, host.py and stats.py, are what
    benchmarks share)."""
    return [p.stem for p in sorted((root / "bench").glob("*.py"))
            if re.search(r"^if __name__ == .__main__.:", p.read_text(encoding="utf-8"), re.M)]


def test_every_benchmark_is_in_results_with_its_command():
    """bench/ holds benchmarks: RESULTS.md names each with the command that measures it (a study's code goes, its
    write-up is in docs/studies.md), so no script there is one nobody knows how to read."""
    results = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert [n for n in runnable(ROOT) if not re.search(rf"python3\s+(?:-\S+\s+)*-m\s+bench\.{n}\b", results)] == []


def test_bench_holds_code_results_md_and_written_results_only():
    """A result file is what a benchmark wrote (under bench/results/, by the command RESULTS.md gives beside it),
    never one edited by hand beside the code; each is named in RESULTS.md, or nothing tells what made it."""
    listed = subprocess.run(["git", "ls-files", "bench"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the committed tree is unknown")
    files = [Path(f).relative_to("bench") for f in listed.stdout.split()]
    results = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert [str(f) for f in files if not (f.suffix == ".py" and len(f.parts) == 1) and f.parts[0] != "results"
            and str(f) not in ("RESULTS.md", "strimzi/pom.xml")] == []
    assert [str(f) for f in files if f.parts[0] == "results" and f"results/{f.name}" not in results] == []


# What a benchmark's top level may call: only what makes a definition (a path, a pattern, a time, a number, a field,
# a counter, a console), never the work itself; its work runs from main() under the main guard.
DEFINING_CALLS = frozenset({
    "Path", "Path().resolve", "re.compile", "dt.datetime", "dt.timedelta", "dt.timezone", "datetime", "timedelta",
    "int", "float", "str", "bytes", "tuple", "frozenset", "field", "dataclasses.field", "count", "itertools.count",
    "os.environ.get", "Console", "TypeVar", "namedtuple", "logging.getLogger"})
DECORATORS = frozenset({
    "dataclass", "dataclasses.dataclass", "contextmanager", "contextlib.contextmanager", "property", "staticmethod",
    "classmethod", "cache", "functools.cache", "lru_cache", "functools.lru_cache"})
LOOPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def dotted(node: ast.AST) -> str:
    """`a.b.c` for a name or an attribute chain, `()` marking a call in it (`Path().resolve`); '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    inner = dotted(node.func if isinstance(node, ast.Call) else node.value) \
        if isinstance(node, (ast.Call, ast.Attribute)) else ""
    return inner and (f"{inner}()" if isinstance(node, ast.Call) else f"{inner}.{node.attr}")


def work_in(expr: ast.AST) -> str | None:
    """What evaluating `expr` at import would run beyond making a definition (a lambda's body runs later), or None."""
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, LOOPS):
            return "a loop"
        if isinstance(node, ast.Call) and dotted(node.func) not in DEFINING_CALLS:
            return f"a call of {dotted(node.func) or ast.unparse(node.func)}"
        todo += [c for c in ast.iter_child_nodes(node) if not isinstance(node, ast.Lambda) or c is not node.body]
    return None


def runs_at_import(body: list[ast.stmt], where: str) -> list[str]:
    """'path:line: what' for each statement of a module's (or a class's) body that does work when it is imported.

    Allowed: imports, docstrings, defs and classes (their decorators, defaults, bases and class bodies held to the same
    rule), assignments of definitions, `if`/`try` holding only those, and anything under the main guard."""
    found = []
    for node in body:
        exprs: list[ast.AST] = []
        inner: list[str] = []
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)) or \
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) or \
                isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in node.decorator_list:
                if dotted(d.func if isinstance(d, ast.Call) else d) not in DECORATORS:
                    found.append(f"{where}:{d.lineno}: a decorator {ast.unparse(d)} (a call at import)")
                exprs += [*d.args, *(k.value for k in d.keywords)] if isinstance(d, ast.Call) else []
            if isinstance(node, ast.ClassDef):
                exprs += [*node.bases, *(k.value for k in node.keywords)]
                inner = runs_at_import(node.body, where)
            else:
                exprs += [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            exprs = [node.value] if node.value else []
        elif isinstance(node, (ast.If, ast.Try)):
            exprs = [node.test] if isinstance(node, ast.If) else [h.type for h in node.handlers if h.type]
            for part in [node.body, node.orelse, *(h.body for h in getattr(node, "handlers", ())),
                         getattr(node, "finalbody", [])]:
                inner += runs_at_import(part, where)
        else:
            what = {ast.For: "a loop", ast.While: "a loop", ast.With: "a with-block", ast.Expr: "an expression"}
            found.append(f"{where}:{node.lineno}: {what.get(type(node), type(node).__name__)}")
        found += [f"{where}:{node.lineno}: {w}" for w in map(work_in, exprs) if w] + inner
    return found


def tools(root: Path) -> list[Path]:
    """The benchmarks' and the campaign's modules under `root`."""
    return [p for d in TOOLS for p in sorted((root / d).glob("*.py")) if p.name != "__init__.py"]


def test_no_benchmark_and_no_campaign_module_runs_anything_at_import():
    """A benchmark or the campaign does its work from main() under `if __name__ == "__main__":`; its top level only
    defines."""
    assert [w for p in tools(ROOT) for w in runs_at_import(ast.parse(p.read_text(encoding="utf-8")).body,
                                                             str(p.relative_to(ROOT)))] == []


def test_work_at_a_benchmarks_top_level_is_named(tmp_path):
    """The check itself can fail: each statement or expression that works at import is named; definitions are not."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "x.py").write_text('''"""A benchmark."""
import re
from pathlib import Path
ROOT = Path(__file__).resolve().parent
LINE = re.compile(r"x")
KEY = lambda r: sorted(r)
def limit(h=float("inf")):
    return h
class Run:
    size: int = 1
    cases = [limit(h) for h in (1, 2)]
print(limit())
runs = {h: limit(h) for h in (0, 1)}
first = limit(3)
for h in (1, 2):
    limit(h)
with open(ROOT) as f:
    pass
if ROOT.exists():
    limit()
@dataclasses.dataclass(frozen=True)
class Ok:
    pass
@atexit.register
def cleanup(x=limit()):
    pass
if __name__ == "__main__":
    print(limit())
''')
    [path] = tools(tmp_path)
    assert runs_at_import(ast.parse(path.read_text()).body, "bench/x.py") == [
        "bench/x.py:11: a loop", "bench/x.py:12: an expression", "bench/x.py:13: a loop",
        "bench/x.py:14: a call of limit", "bench/x.py:15: a loop", "bench/x.py:17: a with-block",
        "bench/x.py:19: a call of ROOT.exists", "bench/x.py:20: an expression",
        "bench/x.py:24: a decorator atexit.register (a call at import)", "bench/x.py:25: a call of limit"]


def test_importing_every_benchmark_and_campaign_module_prints_writes_and_starts_nothing_and_is_quick(tmp_path):
    """Imported in a fresh interpreter from an empty directory (as a test or a tool would), each benchmark or campaign
    module takes seconds of CPU at most, prints nothing, writes nothing there and leaves no thread running."""
    names = [f"{p.parent.name}.{p.stem}" for p in tools(ROOT)]
    child = ("import importlib, json, sys, threading, time\n"
             "took = {}\n"
             "for name in sys.argv[1:]:\n"
             "    start = time.process_time()\n"
             "    importlib.import_module(name)\n"
             "    took[name] = time.process_time() - start\n"
             "sys.stderr.write(json.dumps({'took': took, 'threads': threading.active_count()}))\n")
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", child, *names], cwd=work, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stderr.splitlines()[-1])
    assert (done.stdout, sorted(p.name for p in work.iterdir()), report["threads"]) == ("", [], 1)
    assert {n: round(s, 1) for n, s in report["took"].items() if s > IMPORT_BUDGET_S} == {}
