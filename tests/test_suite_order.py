"""The suite's own scheduling: every file conftest.py starts first exists (a renamed one would silently start last)."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FIRST


def test_every_long_file_named_for_an_early_start_exists():
    here = Path(__file__).parent
    assert [name for name in LONG_FIRST if not (here / name).is_file()] == []
