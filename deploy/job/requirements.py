"""The job image's requirements: the package's dependencies and the extras asked for, without pyspark.

The Spark image already holds PySpark (/opt/spark/python, the same build as its JVM); `pip install` of the package
with its dependencies would add a second one from the package index beside it. The image installs this list, then
the package with --no-deps, and puts the image's own PySpark on the interpreter's path. Before printing anything it
checks that the image's PySpark is a version pyproject.toml accepts:

    python3 requirements.py PYPROJECT_TOML SPARK_VERSION [EXTRA...] > requirements.txt

Exit 2 with one line when the version does not fit. Standard library only: it runs before anything is installed.
"""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PROVIDED = "pyspark"  # by the image, never from the package index


def name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9._-]+)", requirement).group(1)).lower()


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.match(r"\d+(?:\.\d+)*", version).group(0).split("."))


def accepts(specifier: str, version: str) -> bool:
    """Whether `version` meets a comma-separated specifier of ==, !=, >=, <=, >, < clauses (release numbers only,
    padded with zeros as PEP 440 compares them)."""
    have = release(version)
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        op, wanted = re.fullmatch(r"(==|!=|>=|<=|>|<)\s*([\d.]+)", clause).groups()
        want = release(wanted)
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        if not {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]:
            return False
    return True


def provided_specifier(requirements: list[str]) -> str:
    """The specifier pyproject.toml gives the provided package (`pyspark[sql]>=4.3,<4.4` -> `>=4.3,<4.4`)."""
    for requirement in requirements:
        if name(requirement) == PROVIDED:
            return re.sub(r"^\s*[A-Za-z0-9._-]+(\[[^\]]*\])?", "", requirement.split(";")[0]).strip()
    raise SystemExit(f"error: pyproject.toml does not require {PROVIDED}; this list is for an image that provides it")


def requirements(pyproject: dict, extras: list[str]) -> list[str]:
    """The core dependencies and the extras' (the project's own extras resolved), in order, without pyspark."""
    table = pyproject["project"].get("optional-dependencies", {})
    out: list[str] = []

    def add(items: list[str]) -> None:
        for item in items:
            own = re.fullmatch(r"quota-pipeline\[([^\]]+)\]", item.strip())
            if own:
                for extra in own.group(1).split(","):
                    add(table[extra.strip()])
            elif name(item) != PROVIDED and item not in out:
                out.append(item)

    add(pyproject["project"]["dependencies"])
    for extra in extras:
        if extra not in table:
            raise SystemExit(f"error: pyproject.toml has no extra {extra!r}; choose from {', '.join(sorted(table))}")
        add(table[extra])
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python3 requirements.py PYPROJECT_TOML SPARK_VERSION [EXTRA...]", file=sys.stderr)
        return 2
    pyproject = tomllib.loads(Path(argv[0]).read_text())
    version, extras = argv[1], argv[2:]
    wanted = provided_specifier(pyproject["project"]["dependencies"])
    if not accepts(wanted, version):
        print(f"error: the image's PySpark is {version} but the package needs pyspark{wanted}; build on a Spark "
              f"image of a version it accepts (SPARK_IMAGE)", file=sys.stderr)
        return 2
    sys.stdout.write("".join(f"{r}\n" for r in requirements(pyproject, extras)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
