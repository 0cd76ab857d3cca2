"""The CBOR envelope `{t, id?, b?}` of PROTOCOL.md part A, and the CBOR codec rules.

Encoding writes the keys in the order t, id, b (as the upstream vectors do) and each body with
its keys in the writer's order, shortest integer forms and definite lengths: the upstream
vectors (`webapp-vectors.json`, frame `cmd_with_id`) keep insertion order inside bodies, and the
vectors win over RFC 8949 section 4.2's key sort. Rosters, whose bytes are signed, use the full
section 4.2 order (see `roster.py`).

Decoding refuses duplicate keys, indefinite lengths, tags, and nesting deeper than 32; unknown
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

_PLAIN = (str, bytes, int, float, bool, type(None))


def _check_value(value: Any, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise RemoteProtocolError("CBOR nested too deep")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise RemoteProtocolError("CBOR map key is neither text nor integer")
            _check_value(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_value(v, depth + 1)
    elif not isinstance(value, _PLAIN):
        raise RemoteProtocolError(f"CBOR item of type {type(value).__name__} is not allowed")


def _refuse_tag(_decoder: Any, tag: Any) -> Any:
    raise RemoteProtocolError(f"CBOR tag {tag.tag} is not allowed")


def loads(data: bytes) -> Any:
    """Decode one CBOR item (bytes) into plain values: dict, list, str, bytes, int, float, bool, None.

    Raises:
        RemoteProtocolError: malformed CBOR, trailing bytes, duplicate keys, tags, indefinite
            lengths, non-text/integer map keys, or nesting deeper than `MAX_DEPTH`.
    """
    try:
        value = cbor2.loads(
            data,
            allow_duplicate_keys=False,
            allow_indefinite=False,
            max_depth=MAX_DEPTH + 2,
            tag_hook=_refuse_tag,
            semantic_decoders={},
        )
    except RemoteProtocolError:
        raise
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise RemoteProtocolError(f"undecodable CBOR: {exc}") from exc
    _check_value(value)
    return value


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
