"""`to_json` against the plain version it replaced (kept here as the reference): the same
value, of the same types, for decoded CBOR values of every kind, subclasses and odd keys."""

from __future__ import annotations

import math
import random
from typing import Any

from ftwbridge.proto.clean import b64url, clean, to_json


def reference(value: Any) -> Any:
    """`to_json` as it was written first: one `isinstance` chain, recursive."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes):
        return b64url(value)
    if isinstance(value, dict):
        return {
            (clean(k) if isinstance(k, str) else str(k)): reference(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [reference(v) for v in value]
    return clean(str(value))


class Text(str):
    pass


class Number(int):
    pass


class Mapping(dict):  # type: ignore[type-arg]
    pass


TEXTS = ["", "W", "soc", "a\u200bb", "\x1b[31mred", "tab\tand\nline", "\ud800", "\u00e9t\u00e9"]
LEAVES: list[Any] = [
    *TEXTS,
    Text("sub\u200b"),
    Text("plain"),
    0,
    -7,
    2**70,
    True,
    False,
    None,
    Number(5),
    1.5,
    math.nan,
    math.inf,
    b"\x00\xff",
    bytearray(b"ab"),
    (1, "x"),
    object.__new__(object),
]
KEYS: list[Any] = [*TEXTS, Text("k\u200b"), 1, -2, True, None, 1.5, b"k"]


def _value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth >= 4 or roll < 0.5:
        return rng.choice(LEAVES)
    if roll < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    items = {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return Mapping(items) if rng.random() < 0.2 else items


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (a != a and b != b)


def test_to_json_gives_what_the_reference_gives_on_seeded_values() -> None:
    rng = random.Random(2026)
    for _ in range(5000):
        value = _value(rng, 0)
        assert _same(to_json(value), reference(value)), value


def test_to_json_keeps_a_key_cleaned_to_one_already_seen_where_the_reference_does() -> None:
    value = {"ab": 1, "a\u200bb": 2, 3: "x", "3": "y"}
    assert _same(to_json(value), reference(value))
    assert to_json(value) == {"ab": 2, "3": "y"}
