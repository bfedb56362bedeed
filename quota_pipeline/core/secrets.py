"""Secrets masked by value, wherever text may hold one: a configuration value shown by `validate`, a log line,
a traceback. Key names are masked by properties.is_secret; this catches what a name does not tell (a
misspelled `sasl.jaas.confg`, a PEM key under any name, kafka-python logging its whole configuration)."""
from __future__ import annotations

import re

MASK = "******"
# `password': 'x'`, `password="x"`, `sasl.password=x`, `secret: x`: the value after a password-like word.
_SECRET_VALUE = re.compile(r"""((?:password|passwd|secret|token|credential)\w*['"]?\s*[:=]\s*)"""
                           r"""(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^'",;\s})]+)""", re.IGNORECASE)
# A PEM private key, whole (to its END line, or to the end when cut off).
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
                          re.DOTALL)


def redact(text: str) -> str:
    """`text` with password-like values and private keys masked."""
    return _PRIVATE_KEY.sub(MASK, _SECRET_VALUE.sub(r"\1" + MASK, text))


def holds_secret(text: str) -> bool:
    return redact(text) != text
