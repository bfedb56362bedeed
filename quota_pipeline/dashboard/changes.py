"""Which keys changed after a given version: one entry per key, oldest first, so that a reader behind by a few
changes reads only those; bounded, a reader older than what was forgotten rebuilds from a full copy."""
from __future__ import annotations

SLACK = 1024  # entries of removed keys kept beyond twice the live count before the oldest are forgotten


class ChangeLog:
    """`touch(key)` on every change; `since(version)` the keys touched after it (None: too old, rebuild)."""

    def __init__(self) -> None:
        self.version = 0
        self._at: dict[str, int] = {}  # insertion order is version order: a touched key moves to the end
        self._forgotten = 0  # changes up to this version may be missing from `_at`

    def touch(self, key: str) -> int:
        self.version += 1
        self._at.pop(key, None)
        self._at[key] = self.version
        return self.version

    def since(self, version: int) -> list[str] | None:
        """Keys touched after `version`, newest first; None when some of them were forgotten."""
        if version < self._forgotten:
            return None
        out = []
        for key, at in reversed(self._at.items()):
            if at <= version:
                break
            out.append(key)
        return out

    def trim(self, live: int) -> None:
        """Forget the oldest entries once removed keys outnumber the live ones (plus slack): memory follows the
        live key count, not every key ever seen."""
        if len(self._at) <= 2 * live + SLACK:
            return
        for key in list(self._at)[: len(self._at) - live - SLACK // 2]:
            self._forgotten = max(self._forgotten, self._at.pop(key))
