"""The internal hop's HTTP: the client relayed door messages go through (its bounds and pool;
forwarded calls go through `mesh/channel.py`), and which
headers cross the hop either way (RFC 9110 section 7.6.1: never a connection's own; a
bearer token only as its SHA-256, `mesh/signing.py`)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable

import httpx2

from ftwbridge.mcp import deadline
from ftwbridge.store import hash_token

CONNECT_S = 2.0
"""The longest a forward waits to connect to the holder (or for a pooled connection), s."""
POOL_CONNECTIONS = 64
"""Connections to other instances at most, all holders together (keep-alive ones included)."""
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


def new_client(
    deadline_s: float, *, keep_alive_s: float, verify: ssl.SSLContext | None = None
) -> httpx2.AsyncClient:
    """The HTTP client relayed door messages go through (`relay.BoxRelay`; forwarded calls
    go through `channel.HopClient`): `CONNECT_S` to connect or get a pooled
    connection, `deadline_s` for each of write and read, `POOL_CONNECTIONS` at most, no
    redirects, no environment proxies; `https://` holders verified with `verify` (the
    cluster's CA, `mesh.tls.client_context`; None: the system's CAs).

    `keep_alive_s` is the other instances' `keep_alive_s` (the same setting on every
    instance): a pooled connection idle for half of it is dropped, never reused. A request
    sent on a connection the holder is closing for idleness gets no answer, and a forward
    that went out is never sent twice (`holder_lost`); httpx's own expiry (5 s) equals
    hypercorn's keep-alive (5 s), so without the margin a forward could cross the close."""
    return httpx2.AsyncClient(
        timeout=httpx2.Timeout(deadline_s, connect=CONNECT_S, pool=CONNECT_S),
        limits=httpx2.Limits(
            max_connections=POOL_CONNECTIONS,
            max_keepalive_connections=POOL_CONNECTIONS // 2,
            keepalive_expiry=keep_alive_s / 2,
        ),
        follow_redirects=False,
        trust_env=False,
        verify=verify if verify is not None else True,
    )


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
