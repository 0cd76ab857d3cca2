"""The string cleaner of PROTOCOL.md part D, and CBOR values made JSON-safe.

`clean(s)` removes what a reader cannot see but a model would still read: C0 and C1 controls
except tab and newline, ANSI escape sequences whole (CSI, OSC, DCS/SOS/PM/APC strings, and
two-byte escapes), format characters (Unicode category Cf: bidi controls, zero-width characters,
tag characters), private-use and surrogate code points, variation selectors, the combining
grapheme joiner, and fillers that render as nothing (Hangul fillers, braille blank).

`to_json(v)` turns a decoded CBOR value into one `json.dumps` accepts without loss of meaning:
bytes become base64url without padding, integer map keys become decimal strings, NaN and the
infinities become null, and every text (keys and values) goes through `clean`.
"""

from __future__ import annotations

import base64
import math
import re
import unicodedata
from typing import Any, Final

_ANSI: Final = re.compile(
    r"""
    (?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?      # CSI ... final byte
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|$)  # OSC/DCS/SOS/PM/APC ... ST
  | \x1b[\x20-\x2f]*[\x30-\x7e]?                             # other escapes (nF, Fp, Fe, Fs)
    """,
    re.VERBOSE | re.DOTALL,
)
_INVISIBLE_FILLERS: Final = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f")


def _keep(ch: str) -> bool:
    if ch in "\t\n":
        return True
    cp = ord(ch)
    if cp < 0x20 or 0x7F <= cp <= 0x9F:
        return False
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:  # variation selectors
        return False
    if ch in _INVISIBLE_FILLERS:
        return False
    return unicodedata.category(ch) not in ("Cf", "Co", "Cs")


def clean(text: str) -> str:
    """Return `text` without hidden characters (PROTOCOL.md part D); visible text is unchanged."""
    if text.isascii() and text.isprintable():
        return text
    text = _ANSI.sub("", text)
    return "".join(ch for ch in text if _keep(ch))


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 4648 section 5), as JSON carries bytes."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_SAME: Final = frozenset({int, bool, type(None)})
"""Types whose values `to_json` returns as they are (exactly these, not subclasses)."""


def _text(text: str) -> str:
    """`clean(text)`, with its fast path for visible ASCII taken before the call."""
    return text if text.isascii() and text.isprintable() else clean(text)


def to_json(value: Any) -> Any:
    """A JSON-safe, cleaned copy of a decoded CBOR value (see the module docstring).

    The plain types a decoder gives (dict, list, str, int, bool, None) are told apart by
    their exact type, and a container's plain text and numbers are taken in its own loop;
    anything else (floats, bytes, subclasses) goes through `_other`, the same rules."""
    kind = type(value)
    if kind is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                key = _key(k)
            elif k.isascii() and k.isprintable():
                key = k
            else:
                key = clean(k)
            t = type(v)
            if t is str:
                out[key] = v if v.isascii() and v.isprintable() else clean(v)
            elif t in _SAME:
                out[key] = v
            else:
                out[key] = to_json(v)
        return out
    if kind is str:
        return _text(value)
    if kind in _SAME:
        return value
    if kind is list:
        return [to_json(v) for v in value]
    return _other(value)


def _key(k: Any) -> str:
    """A map key that is not plain text: cleaned text, else its decimal (or other) text."""
    return clean(k) if isinstance(k, str) else str(k)


def _other(value: Any) -> Any:
    """`to_json` of a value that is not of a plain decoded type, by `isinstance`."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes):
        return b64url(value)
    if isinstance(value, dict):
        return {_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return clean(str(value))
