"""`fastjson` writes what Python's `json` writes, on every kind of value a result can hold."""

from __future__ import annotations

import enum
import math
import random
import struct
import uuid
from collections import OrderedDict
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftwbridge.mcp.fastjson import compact_json, encoded, json_string, python_json
from ftwbridge.mcp.inbound import Route
from ftwbridge.mcp.replies import result_response
from ftwbridge.mcp.results import DATA_NOTE, ok_result


def same(value: Any) -> None:
    want = python_json(value)
    assert compact_json(value) == want
    assert encoded(value) == (want, want.encode("utf-8", "backslashreplace"))


def test_every_code_point_as_a_string_a_key_and_a_json_string() -> None:
    for start in range(0, 0x110000, 0x800):
        text = "".join(chr(c) for c in range(start, min(start + 0x800, 0x110000)))
        same(text)
        same({text: [text]})
        assert json_string(text) == python_json(text)
    for c in (0xD800, 0xDBFF, 0xDC00, 0xDFFF):  # lone surrogates: json writes them, raw
        same(chr(c))
        same({"a": f"x{chr(c)}y", chr(c): 1})
        assert json_string(f"x{chr(c)}") == python_json(f"x{chr(c)}")


def test_floats_of_every_exponent_and_the_odd_ones() -> None:
    rng = random.Random(7)
    odd = [0.0, -0.0, 1.0, -1.5, 1e16, 1e15, 9999999999999998.0, 1e-4, 9.9e-5, 5e-324]
    odd += [1.7976931348623157e308, math.nan, math.inf, -math.inf, 0.1, 1 / 3]
    for f in odd:
        same(f)
        same({"v": f, "w": [f, 1]})
    for _ in range(5_000):
        bits = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        scaled = round(rng.uniform(-1e4, 1e4), rng.randint(0, 6)) * 10.0 ** rng.randint(-25, 25)
        same(bits)
        same([scaled, {"x": scaled}])


def test_integers_at_and_past_64_bits() -> None:
    for n in (0, -1, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 10**40):
        same(n)
        same({"n": [n, -n]})


class Word(str):
    pass


class Count(int):
    pass


class Colour(enum.IntEnum):
    RED = 1


class Mode(enum.StrEnum):
    AUTO = "auto"


class Bag(dict[str, Any]):
    pass


class Row(list[Any]):
    pass


def test_subclasses_keys_that_are_not_text_tuples_and_depth() -> None:
    for value in (
        Word("w\u00e9"),
        Count(5),
        Colour.RED,
        Mode.AUTO,
        {Mode.AUTO: 1, Word("k"): Colour.RED},
        Bag(a=Row([1, Word("x")])),
        OrderedDict(b=1, a=2),
        True,
        [False, None],
        {1: "int", 2.5: "float", False: "bool", None: "none", -3: "neg"},
        (1, ("t", [None])),
        {"": "", "\u2028": "\u2029\x7f"},
    ):
        same(value)
    deep: Any = 1
    for _ in range(400):  # past orjson's 254 levels
        deep = [deep]
    same(deep)


def refused_alike(value: Any) -> None:
    """`json`, `compact_json` and `encoded` all raise `TypeError` for `value`."""
    with pytest.raises(TypeError):
        python_json(value)
    with pytest.raises(TypeError):
        compact_json(value)
    with pytest.raises(TypeError):
        encoded(value)


def test_what_json_refuses_is_refused_the_same_way() -> None:
    for value in (b"bytes", {1, 2}, object(), {(1, 2): 3}, bytearray(b"x")):
        refused_alike(value)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        compact_json(loop)


class Plain(enum.Enum):
    ON = "on"


@pytest.mark.parametrize(
    "odd", [Plain.ON, uuid.UUID(int=7), orjson.Fragment(b'"raw\x00"'), orjson.Fragment(b"{")]
)
def test_an_enum_a_uuid_and_a_fragment_are_refused_as_json_refuses_them(odd: Any) -> None:
    """orjson writes these three natively (a Fragment's bytes unescaped); `json` refuses them."""
    for value in (odd, [1, odd], {"a": {"b": [odd]}}, {"s": "x", "n": 1, "v": odd}):
        refused_alike(value)
        with pytest.raises(TypeError):
            ok_result({"v": value})


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_random_values(value: Any) -> None:
    same(value)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_random_json_strings(text: str) -> None:
    assert json_string(text) == python_json(text)


@pytest.mark.parametrize(
    "value",
    [
        {"a": "b\u00e9\ud800", "n": [1, 2.5, None, 10**30], "k": {"x": "1e5 text"}},
        {"fields": {"grid_w": 446, "pv_w": -2}, "sources": {"meter.p1": {"state": "live"}}},
        {"tab": "a\tb\x00", "q": '"\\', "ok": True, "f": 6e-05},
    ],
)
def test_a_success_is_the_bytes_python_json_wrote(value: dict[str, Any]) -> None:
    """The whole body of a success, against the one `json` alone writes (before orjson)."""
    route = Route("modern", "2026-07-28", "tools/call", {}, 7)
    result = ok_result(value)
    text = python_json(value)
    rest = {
        "content": [{"type": "text", "text": text}, {"type": "text", "text": DATA_NOTE}],
        "isError": False,
        "resultType": "complete",
    }
    before = python_json({"jsonrpc": "2.0", "id": 7, "result": rest})
    want = before[:-2].encode("utf-8", "backslashreplace")
    want += b',"structuredContent":' + text.encode("utf-8", "backslashreplace") + b"}}"
    assert result_response(route, result).body == want
