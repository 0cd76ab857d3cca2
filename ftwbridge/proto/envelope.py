"""The CBOR envelope `{t, id?, b?}` of PROTOCOL.md part A, and the CBOR codec rules.

Encoding writes the keys in the order t, id, b (as the upstream vectors do) and each body with
its keys in the writer's order, shortest integer forms and definite lengths: the upstream
vectors (`webapp-vectors.json`, frame `cmd_with_id`) keep insertion order inside bodies, and the
vectors win over RFC 8949 section 4.2's key sort. Rosters, whose bytes are signed, use the full
section 4.2 order (see `roster.py`).

Decoding refuses trailing bytes, duplicate keys, indefinite lengths, every tag (bignums and
self-describe included), simple values but false/true/null, and nesting deeper than 32; unknown
envelope keys are ignored. Every failure raises `RemoteProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import cbor2

from .errors import LocalProtocolError, RemoteProtocolError

MAX_ID: Final = 2**32 - 1
"""Request ids are u32 (PROTOCOL.md part A)."""
MAX_DEPTH: Final = 32
"""Deepest nesting we decode; box answers need at most 6."""

_ARG_BYTES: Final = {24: 1, 25: 2, 26: 4, 27: 8}
_SIMPLE_OK: Final = frozenset({20, 21, 22, 25, 26, 27})
"""Major type 7 values we take: false, true, null, and half, single and double floats."""
_KEY_MAJORS: Final = frozenset({0, 1, 3})
"""Map keys are unsigned or negative integers, or text."""

# What `scan` does with each of the 256 head bytes (RFC 8949 section 3), worked out once:
_ATOM, _STRING, _ARRAY, _MAP, _BAD = range(5)


def _head_table() -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[str, ...]]:
    acts, sizes, immediates, problems = [], [], [], []
    for head in range(256):
        major, info = head >> 5, head & 0x1F
        size = _ARG_BYTES.get(info, 0)
        problem = ""
        if info == 31:
            problem = "CBOR indefinite lengths are not allowed"
        elif 28 <= info <= 30:
            problem = "CBOR reserved additional information"
        elif major == 6:
            problem = "CBOR tag {} is not allowed"
        elif major == 7 and info not in _SIMPLE_OK:
            problem = "CBOR simple value {} is not allowed"
        act = (_ATOM, _ATOM, _STRING, _STRING, _ARRAY, _MAP, _BAD, _ATOM)[major]
        acts.append(_BAD if problem else act)
        sizes.append(size)
        immediates.append(info if info < 24 else -1)
        problems.append(problem)
    return tuple(acts), tuple(sizes), tuple(immediates), tuple(problems)


_ACT, _SIZE, _IMMEDIATE, _PROBLEM = _head_table()
_KEY_OK: Final = tuple((h >> 5) in _KEY_MAJORS for h in range(256))
_LEAF: Final = tuple(
    (arg if act == _STRING else 0)
    if act in (_ATOM, _STRING) and arg >= 0
    else (size if act == _ATOM else -1)
    for act, arg, size in zip(_ACT, _IMMEDIATE, _SIZE, strict=True)
)
"""For a head byte that begins a whole item of known length: the bytes that follow it (a
string shorter than 24 bytes: its length; an integer or a float: its argument's bytes; a
small integer, false, true, null: 0); -1 for every other head byte (longer strings, arrays,
maps, refused ones)."""
_OVERRUN: Final = tuple(
    "CBOR string runs past the end" if act == _STRING else "CBOR ends inside an item's head"
    for act in _ACT
)
"""The error for a `_LEAF` item that runs past the end, by head byte."""


def _bad(data: bytes, pos: int, end: int) -> RemoteProtocolError:
    """The error for the head byte at `pos - 1` that `_ACT` marks `_BAD`."""
    head = data[pos - 1]
    size = _SIZE[head]
    if pos + size > end:
        return RemoteProtocolError("CBOR ends inside an item's head")
    arg = int.from_bytes(data[pos : pos + size], "big") if size else head & 0x1F
    return RemoteProtocolError(_PROBLEM[head].format(arg))


def _bad_key(data: bytes, pos: int, end: int) -> RemoteProtocolError:
    """The error for a map key whose head byte, at `pos - 1`, is not an integer's or text's:
    a broken head is named first, as for any item."""
    head = data[pos - 1]
    if head & 0x1F >= 28:
        return _bad(data, pos, end)
    if pos + _SIZE[head] > end:
        return RemoteProtocolError("CBOR ends inside an item's head")
    return RemoteProtocolError("CBOR map key is neither text nor integer")


def scan(data: bytes) -> None:
    """Check the structure of one CBOR item (RFC 8949 section 3) before anything decodes it.

    Refused: anything after the item, any tag (major type 6, bignums and self-describe
    included), indefinite lengths, simple values other than false/true/null, undefined,
    reserved additional information, map keys that are neither integer nor text, nesting
    deeper than `MAX_DEPTH`, and lengths past the end of `data`. Each head byte's meaning comes
    from a table made once (`_head_table`), so an item costs a few lookups, and an item of a
    length its head gives (`_LEAF`: most items of a box's answer) one.

    Raises:
        RemoteProtocolError: naming the first rule broken.
    """
    end = len(data)
    pos = 0
    left = 1  # items still due at this level (a map's pairs count 2)
    in_map = False
    outer: list[tuple[int, bool]] = []  # each enclosing level's (left after this item, in_map)
    act_of, size_of, immediate_of, leaf_of, key_ok = _ACT, _SIZE, _IMMEDIATE, _LEAF, _KEY_OK
    head = 0
    try:
        while True:
            head = data[pos]  # past the end: IndexError, below
            pos += 1
            if in_map and not left & 1:
                if not key_ok[head]:
                    raise _bad_key(data, pos, end)
                skip = leaf_of[head]
                if skip >= 0:  # a key of a length its head gives: its value's head at once
                    pos += skip
                    left -= 1
                    head = data[pos]
                    pos += 1
            skip = leaf_of[head]
            if skip >= 0:  # most items: an integer, a float, a short string, false, true or null
                pos += skip  # past the end: found at the next item, or at the item's end
                left -= 1
                while not left:
                    if not outer:
                        if pos > end:
                            raise RemoteProtocolError(_OVERRUN[head])
                        if pos != end:
                            raise RemoteProtocolError(f"{end - pos} bytes after the CBOR item")
                        return
                    left, in_map = outer.pop()
                continue
            act = act_of[head]
            if act == _BAD:
                raise _bad(data, pos, end)
            arg = immediate_of[head]
            if arg < 0:
                size = size_of[head]
                if pos + size > end:
                    raise RemoteProtocolError("CBOR ends inside an item's head")
                if act != _ATOM:
                    arg = int.from_bytes(data[pos : pos + size], "big")
                pos += size
            if act == _STRING:
                if arg > end - pos:
                    raise RemoteProtocolError("CBOR string runs past the end")
                pos += arg
            elif act != _ATOM and arg:  # a non-empty array or map
                count = arg * 2 if act == _MAP else arg
                if count > end - pos:  # every item takes at least one byte
                    raise RemoteProtocolError("CBOR container runs past the end")
                if len(outer) >= MAX_DEPTH:
                    raise RemoteProtocolError("CBOR nested too deep")
                outer.append((left - 1, in_map))
                left, in_map = count, act == _MAP
                continue
            left -= 1
            while not left:
                if not outer:
                    if pos != end:
                        raise RemoteProtocolError(f"{end - pos} bytes after the CBOR item")
                    return
                left, in_map = outer.pop()
    except IndexError:  # the next head is past the end: a leaf ran past it, or nothing is left
        if pos > end:
            raise RemoteProtocolError(_OVERRUN[head]) from None
        raise RemoteProtocolError("CBOR ends inside an item") from None


def loads(data: bytes) -> Any:
    """Decode one CBOR item (bytes) into plain values: dict, list, str, bytes, int, float, bool, None.

    `scan` checks the structure first; cbor2 then decodes what passed, refusing duplicate
    map keys and text that is not UTF-8.

    Raises:
        RemoteProtocolError: malformed CBOR, trailing bytes, duplicate keys, tags, indefinite
            lengths, non-text/integer map keys, or nesting deeper than `MAX_DEPTH`.
    """
    scan(data)
    try:
        return cbor2.loads(data, allow_duplicate_keys=False, max_depth=MAX_DEPTH + 2)
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise RemoteProtocolError(f"undecodable CBOR: {exc}") from exc


def dumps(value: Any, *, canonical: bool = False) -> bytes:
    """Encode plain values as CBOR (bytes); `canonical=True` sorts map keys (RFC 8949 4.2.1).

    Raises:
        LocalProtocolError: a value CBOR cannot carry.
    """
    try:
        return cbor2.dumps(value, canonical=canonical)
    except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
        raise LocalProtocolError(f"cannot encode as CBOR: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Envelope:
    """One message: type `t`, optional request id `id` (u32), optional body `b` (any CBOR value)."""

    t: str
    id: int | None = None
    b: Any = None

    def encode(self) -> bytes:
        """The envelope's CBOR bytes, keys in the order t, id, b (upstream vectors).

        Raises:
            LocalProtocolError: empty type, id outside u32, or an unencodable body.
        """
        if not self.t:
            raise LocalProtocolError("envelope type is empty")
        items: dict[str, Any] = {"t": self.t}
        if self.id is not None:
            if isinstance(self.id, bool) or not 0 <= self.id <= MAX_ID:
                raise LocalProtocolError("envelope id must be a u32")
            items["id"] = self.id
        if self.b is not None:
            items["b"] = self.b
        return dumps(items)


def decode_envelope(data: bytes) -> Envelope:
    """Decode envelope bytes into an `Envelope`, ignoring unknown keys (PROTOCOL.md part A).

    Raises:
        RemoteProtocolError: not a CBOR map, `t` missing or not text, `id` not a u32, or any
            failure of `loads`.
    """
    value = loads(data)
    if not isinstance(value, dict):
        raise RemoteProtocolError("envelope is not a map")
    t = value.get("t")
    if not isinstance(t, str) or not t:
        raise RemoteProtocolError("envelope has no text `t`")
    rid = value.get("id")
    if rid is not None and (
        isinstance(rid, bool) or not isinstance(rid, int) or not 0 <= rid <= MAX_ID
    ):
        raise RemoteProtocolError("envelope `id` is not a u32")
    return Envelope(t, rid, value.get("b"))
