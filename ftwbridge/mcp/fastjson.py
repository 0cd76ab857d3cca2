"""Compact JSON text, byte for byte what Python's `json` writes, by orjson where that is safe.

`json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode` spent about 94 k
instructions on a `status` tool's value (642 characters of JSON) and 21 k on writing that text
again as a JSON string, about 3 % of a warm call (docs/performance.md, "The warm call, next
round"). orjson writes the same value in about 11 k. The two write the same text for the
values a tool result holds, except in ways that are told apart here:

- floats: orjson writes some of them otherwise (`0.00006` where `json` writes `6e-05`) and
  NaN and the infinities as `null`. Every float orjson writes has a digit followed by `.`
  or `e`, or is `null`: text with either is written again by `json`, so a float never takes
  the fast path (a string holding such characters only costs the second encoding);
- types: orjson writes an `enum.Enum`, a `uuid.UUID` and an `orjson.Fragment` (its bytes
  as they are, neither escaped nor cleaned), which `json` refuses, and has no option to pass
  them to `default`. `marshal.dumps` (in C, about 18 k instructions for the `status` value
  against orjson's 11 k) refuses every object but the core types, their subclasses too, so a
  value it takes holds exact dicts, lists, tuples, text, numbers, True, False and None (or
  bytes, sets and the like, which orjson refuses), and anything else goes to `json`, which
  writes it (a subclass of text or int) or raises its own `TypeError`;
- what orjson refuses (lone surrogates, integers past 64 bits, keys that are not text,
  nesting past 254 levels): `json` writes the value, or raises its own error for it.

`tests/mcp/test_fastjson.py` compares both ways over every code point, floats of every
exponent, the three types above and random nested values.
"""

from __future__ import annotations

import json
import marshal
from typing import Any, Final

import orjson

python_json: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`, its encoder made once."""

_SKETCH: Final = bytes(
    ord("0")
    if chr(b).isdigit() and b < 128
    else ord(".")
    if b in b".eE"
    else b
    if b in b"nul"
    else 32
    for b in range(256)
)
"""Every digit as `0`, `.`, `e` and `E` as `.`, the letters of `null` as they are, all else a
space: a float orjson writes leaves `0.` (a digit before its point or exponent), NaN `null`."""


def _maybe_float(out: bytes) -> bool:
    """Whether orjson may have written a float in `out`: a digit followed by `.`, `e` or
    `E`, or `null` (module docstring). Searched in one translated copy (a regular
    expression, or a search per case, took as long as orjson's whole encoding)."""
    sketch = out.translate(_SKETCH)
    return b"0." in sketch or b"null" in sketch


def _fast(value: Any) -> bytes | None:
    """orjson's text of `value` when it is `json`'s (module docstring), else None."""
    try:
        marshal.dumps(value, 4)  # ValueError for any but the core types (module docstring)
        out = orjson.dumps(value)
    except (ValueError, TypeError):  # orjson.JSONEncodeError is a TypeError
        return None
    return None if _maybe_float(out) else out


def encoded(value: Any) -> tuple[str, bytes]:
    """`value` as compact JSON text (what `python_json` writes) and that text as UTF-8, a lone
    surrogate in it written `\\udxxx` (`backslashreplace`, as `http.json_response` does).

    Raises:
        TypeError, ValueError: as `python_json` for a value it cannot write.
    """
    out = _fast(value)
    if out is None:
        text = python_json(value)
        return text, text.encode("utf-8", "backslashreplace")
    return out.decode(), out


def compact_json(value: Any) -> str:
    """`value` as compact JSON text, non-ASCII kept: what `python_json` writes.

    Raises:
        TypeError, ValueError: as `python_json` for a value it cannot write.
    """
    out = _fast(value)
    return python_json(value) if out is None else out.decode()


def json_string(text: str) -> str:
    """`text` written as one JSON string (quotes and escapes), as `python_json(text)`."""
    if type(text) is not str:
        return python_json(text)
    try:
        return orjson.dumps(text).decode()
    except TypeError:  # a lone surrogate
        return python_json(text)
