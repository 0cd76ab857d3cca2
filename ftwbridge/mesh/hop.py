"""The internal hop's HTTP rules (its channel: `mesh/channel.py`): which headers cross the hop
either way (RFC 9110 section 7.6.1: never a connection's own; a bearer token only as its
SHA-256, `mesh/signing.py`)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ftwbridge.mcp import deadline
from ftwbridge.store import hash_token

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "upgrade",
        "host",
        "content-length",
        "proxy-connection",
        "trailer",
    }
)
"""Headers of one connection (RFC 9110 section 7.6.1), never passed on either way."""


STREAM_READ_S = 60.0
"""A forwarded listen stream's bound on each read, s (four of the holder's keep-alive comments
at their 15 s default)."""


def end_to_end(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A holder's answer headers (lower-case names) passed back to the client: the end-to-end
    ones, without its `Date` and `Server` (this instance's HTTP server sends its own); a name
    sent twice is joined with ", " (RFC 9110 section 5.3)."""
    out: dict[str, str] = {}
    for k, v in headers:
        if k in HOP_BY_HOP or k in ("date", "server"):
            continue
        out[k] = f"{out[k]}, {v}" if k in out else v
    return out


def has_header(headers: Iterable[tuple[str, str]], name: str) -> bool:
    """Whether `headers` (lower-case names) carry `name` with a value that is not empty."""
    return any(k == name and v for k, v in headers)


def passed_on(headers: dict[str, list[str]], *, drop_authorization: bool) -> list[tuple[str, str]]:
    """The client's headers sent on: all but the connection's own (`HOP_BY_HOP`), the mesh's
    (a client's `ftw-mesh-*` never pass), and `Authorization` when its digest goes instead."""
    return [
        (k, v)
        for k, vs in headers.items()
        for v in vs
        if k not in HOP_BY_HOP
        and not k.startswith("ftw-mesh-")
        and k != deadline.BUDGET  # a client's own never passes: the entry sends the budget
        and not (k == "authorization" and drop_authorization)
    ]


def token_digest(values: list[str]) -> bytes | None:
    """The SHA-256 of the request's one bearer token (which the entry has verified), or None
    when it has not exactly one (then its `Authorization` goes as it came, and the holder
    refuses it as the entry would have)."""
    scheme, _, token = (values[0] if len(values) == 1 else "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return hash_token(token.strip())


def dumps(value: object) -> bytes:
    """`value` as compact JSON bytes."""
    return json.dumps(value, separators=(",", ":")).encode()
