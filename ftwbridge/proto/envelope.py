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


def scan(data: bytes) -> None:
    """Check the structure of one CBOR item (RFC 8949 section 3) before anything decodes it.

    Refused: anything after the item, any tag (major type 6, bignums and self-describe
    included), indefinite lengths, simple values other than false/true/null, undefined,
    reserved additional information, map keys that are neither integer nor text, nesting
    deeper than `MAX_DEPTH`, and lengths past the end of `data`.

    Raises:
        RemoteProtocolError: naming the first rule broken.
    """
    end = len(data)
    pos = 0
    stack: list[int] = []  # items still due in each open array or map (maps count 2 per pair)
    maps: list[bool] = []
    while True:
        if pos >= end:
            raise RemoteProtocolError("CBOR ends inside an item")
        head = data[pos]
        major, info = head >> 5, head & 0x1F
        pos += 1
        if info < 24:
            arg = info
        elif info in _ARG_BYTES:
            n = _ARG_BYTES[info]
            if pos + n > end:
                raise RemoteProtocolError("CBOR ends inside an item's head")
            arg = int.from_bytes(data[pos : pos + n], "big")
            pos += n
        elif info == 31:
            raise RemoteProtocolError("CBOR indefinite lengths are not allowed")
        else:
            raise RemoteProtocolError("CBOR reserved additional information")
        if stack and maps[-1] and stack[-1] % 2 == 0 and major not in _KEY_MAJORS:
            raise RemoteProtocolError("CBOR map key is neither text nor integer")
        if major in (2, 3):
            if arg > end - pos:
                raise RemoteProtocolError("CBOR string runs past the end")
            pos += arg
        elif major in (4, 5):
            count = arg * (2 if major == 5 else 1)
            if count > end - pos:  # every item takes at least one byte
                raise RemoteProtocolError("CBOR container runs past the end")
            if count:
                if len(stack) >= MAX_DEPTH:
                    raise RemoteProtocolError("CBOR nested too deep")
                stack.append(count + 1)  # +1: the decrement below counts the container itself
                maps.append(major == 5)
        elif major == 6:
            raise RemoteProtocolError(f"CBOR tag {arg} is not allowed")
        elif major == 7 and info not in _SIMPLE_OK:
            raise RemoteProtocolError(f"CBOR simple value {arg} is not allowed")
        while stack:
            stack[-1] -= 1
            if stack[-1]:
                break
            stack.pop()
            maps.pop()
        if not stack:
            break
    if pos != end:
        raise RemoteProtocolError(f"{end - pos} bytes after the CBOR item")


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
