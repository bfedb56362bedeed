"""Package data, found through the package (importlib.resources) so a wheel install works anywhere.

schemas/ (JSON Schemas of the journal, the decision record and simulator scenarios), demo/ (the demo's
configuration), scenarios/ (simulator scenarios), examples/ (an example config and journal), log4j2.properties.
The checkout's top-level schemas/ and conf/ entries are links to these files.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema


def path(name: str) -> Path:
    """A file of the package data as a filesystem path (wheels and checkouts are unpacked on disk)."""
    return Path(str(resources.files(__name__).joinpath(name)))


def text(name: str) -> str:
    """A file of the package data as text, also from the zip spark-submit.sh ships (where `path` names no file)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    """`volume_snapshot`, `throttle_decision` or `simulator_scenario`."""
    return json.loads(text(f"schemas/{name}.schema.json"))


@lru_cache(maxsize=None)
def validator(name: str) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema(name))
    cls.check_schema(schema(name))
    # jsonschema silently skips a format whose checker library is missing: "yesterday" would pass as a date-time.
    if "date-time" not in cls.FORMAT_CHECKER.checkers:
        raise RuntimeError("jsonschema cannot check date-time formats: pip install rfc3339-validator "
                           "(a dependency of quota-pipeline; reinstall the package)")
    return cls(schema(name), format_checker=cls.FORMAT_CHECKER)


def errors(name: str, record: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '<record>'}: {e.message}"
            for e in validator(name).iter_errors(record)]
