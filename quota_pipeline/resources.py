"""The JSON Schemas of the journal record and the decision record, loaded for validation."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


@lru_cache(maxsize=None)
def validator(name: str) -> jsonschema.protocols.Validator:
    """`volume_snapshot` or `throttle_decision`, from schemas/ beside the package (a source checkout)."""
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def errors(name: str, record: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '<record>'}: {e.message}"
            for e in validator(name).iter_errors(record)]
