"""The numbers the compiled decision uses for words: index encodings of the configuration's and the record's values,
and the marker of an empty slot. numba reads them as constants."""
from __future__ import annotations

from quota_pipeline.core.model import SOURCES

# storage.offline.log.dir.policy as Params.offline holds it.
VIOLATE, PIN, LAST_KNOWN = 0, 1, 2
OFFLINE_POLICY_CODES = {"violate": VIOLATE, "pin": PIN, "last-known": LAST_KNOWN}
# A decision's source as Out.source and State.decision[2] hold it; SOURCE_NAMES[code] is the record's word.
SOURCE_NAMES = SOURCES
OBSERVATION, RETAINED, FALLBACK = (SOURCE_NAMES.index(s) for s in ("OBSERVATION", "RETAINED", "FALLBACK"))
# A limit's kind as Params.hard_kind and soft_kind hold it.
NO_LIMIT, BYTES, RATIO = 0, 1, 2
NONE = -1  # no time, no snapshot row, no log dir
FENCED_PIN = 2  # State.pinned: pinned because its broker was fenced (reference: CachedReading.fenced_pin)
