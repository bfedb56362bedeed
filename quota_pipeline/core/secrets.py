"""What counts as a secret, by a setting's name (secret_name) and by the look of a value (redact): a configuration
value shown by `validate` or an error line, a log line, a traceback. properties.shown applies both to every value
printed or logged; redact alone catches what a name does not tell (a misspelled `sasl.jaas.confg`, a PEM key under
any name, credentials in a URI's userinfo, kafka-python logging its whole configuration)."""
from __future__ import annotations

import re

MASK = "******"
# A name segment holding one of these words names a secret: ssl.truststore.password, client.secret, api.token,
# sasl.oauthbearer.client.credentials.client.secret.
_SECRET_WORDS = ("password", "passwd", "secret", "token", "credential")
# A last segment ending with one of these: the value is a key (api.key, x.secret.key, accesskey, signing.keys);
# not a setting about keys (key.serializer, ssl.keystore.type, key.converter).
_KEY_ENDINGS = ("key", "keys")
_SEGMENTS = re.compile(r"[._-]")
# `password': 'x'`, `password="x"`, `sasl.password=x`, `basic.auth.user.info=u:p`, `secret: x`: the value after a
# password-like word in free text.
_SECRET_VALUE = re.compile(r"""((?:password|passwd|secret|token|credential|user[._-]?info|"""
                           r"""(?:api|access|private)[._-]?key)[\w.-]*['"]?\s*[:=]\s*)"""
                           r"""(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^'",;\s})]+)""", re.IGNORECASE)
# A URI's userinfo, whole (`s3://KEY:SECRET@bucket`, `http://user@host`): up to the last '@' of the URI, since a
# secret may hold '/' or '@' unescaped (an AWS secret key often holds '/').
_USERINFO = re.compile(r"""\b([a-z][a-z0-9+.-]*://)[^\s'"<>]*@""", re.IGNORECASE)
# A PEM private key, whole (to its END line, or to the end when cut off).
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
                          re.DOTALL)


def secret_name(key: str) -> bool:
    """Whether a setting's name says its value is a secret (under any prefix, any case): a segment (split on '.',
    '_' and '-') holding password, passwd, secret, token or credential; a last segment ending with key or keys;
    user.info (`basic.auth.user.info`, `userinfo`); sasl.jaas.config."""
    segments = _SEGMENTS.split(key.lower())
    joined = ".".join(segments)
    return (any(word in s for s in segments for word in _SECRET_WORDS)
            or segments[-1].endswith(_KEY_ENDINGS)
            or "user.info" in joined or "userinfo" in segments
            or joined.endswith("sasl.jaas.config"))


def redact(text: str) -> str:
    """`text` with password-like values, URI userinfo and private keys masked."""
    return _PRIVATE_KEY.sub(MASK, _USERINFO.sub(r"\1" + MASK + "@", _SECRET_VALUE.sub(r"\1" + MASK, text)))


def holds_secret(text: str) -> bool:
    return redact(text) != text
