"""Calls routed to the instance that holds their home's uplink (docs/operations.md, "Calls
at the holder"): a home tag carried in the access token, which the balancer keys on, and the
answer's header naming the instance that holds the home, which the balancer learns from.

A box's uplink cannot be placed by its home: its upgrade request to `/v1/box` carries nothing
of the home (PROTOCOL.md part C: the home is named in `door.hello`, after the WebSocket is up),
so the uplink lands wherever the balancer sends it, and the balancer learns where afterwards.
Every access token minted by a bridge with `mesh_key` (every instance of a cluster) starts
with its home's tag:

    <tag>.<secret>     tag: 12 base64url characters, secret: 43 (32 random bytes)

The tag is a keyed hash of the home (HMAC-SHA256 under a key drawn from `mesh_key`, cut to 9
bytes): the same for every token of one home at every instance, and, without the key, no
clue to which home it is; a token still has its 256 random bits, and is checked exactly as
before (its SHA-256 looked up in the store). The tag only steers: a token whose tag was
altered is another token, unknown to the store, and a wrong tag costs one hop at most.
Tokens minted before tags, or by a bridge without `mesh_key`, have none and are routed as
before (any instance, one hop to the holder).

An instance that holds a home's uplink names itself (its `instance_id`) in the `ftw-holder`
header of every `/mcp` answer to that home's tokens; a forwarded call's answer carries the
holder's header back through the entry. The balancer keeps tag -> instance from those headers,
sends a tagged call to the instance named, and removes the header before the client sees it.
A refused token's answer names no holder, so nobody can teach the balancer a wrong one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from .http import HttpResponse

TAG_BYTES = 9
"""The tag's length before encoding, bytes: 72 bits, 12 base64url characters. Two homes share
a tag with probability about n^2 / 2^73 among n homes (1 in 10^10 for a million): they would
then share a learned holder, which costs one of them a hop per call, nothing else."""
TAG_CHARS = 12
"""The tag's length in the token, characters (base64url of `TAG_BYTES`, no padding)."""
SECRET_BYTES = 32
"""Random bytes behind the tag in each token (RFC 6750's token is then 56 characters)."""
SEPARATOR = "."
"""Between the tag and the secret; in RFC 6750's `b64token` alphabet and never in base64url,
so a token without a tag (43 base64url characters) never looks tagged."""
HOLDER_HEADER = "ftw-holder"
"""The `/mcp` answer's header naming the instance that holds the token's home (its
`instance_id`, which the balancer's server of that instance is named); the balancer removes it."""
KEY_LABEL = b"ftw.route.v1 tag key"
"""What the tag key is drawn from `mesh_key` with (HMAC-SHA256), so it is no other key's."""

_TAGGED = re.compile(r"([A-Za-z0-9_-]{" + str(TAG_CHARS) + r"})\.[A-Za-z0-9_-]+")


def tag_key(mesh_key: bytes) -> bytes:
    """The 32-byte key of the home tags, drawn from the cluster's 32-byte `mesh_key`: every
    instance with the same `mesh_key` tags a home alike."""
    return hmac.new(mesh_key, KEY_LABEL, hashlib.sha256).digest()


def home_tag(key: bytes, home: str) -> str:
    """The tag of `home` under `key` (`tag_key`): `TAG_CHARS` base64url characters of
    HMAC-SHA256(key, home as UTF-8)."""
    mac = hmac.new(key, home.encode("utf-8"), hashlib.sha256).digest()[:TAG_BYTES]
    return base64.urlsafe_b64encode(mac).decode("ascii")


def tagged_token(tag: str) -> str:
    """A new access token's text: `tag`, `SEPARATOR`, then `SECRET_BYTES` random bytes in
    base64url (`secrets.token_urlsafe`)."""
    return tag + SEPARATOR + secrets.token_urlsafe(SECRET_BYTES)


def tag_of(token: str) -> str | None:
    """The home tag a token's text starts with, or None for a token without one (minted
    before tags, or without `mesh_key`). Reads the shape only: whether the token is good is
    for the store to say."""
    found = _TAGGED.fullmatch(token)
    return None if found is None else found.group(1)


class HomeTags:
    """Tags homes under the key drawn from `mesh_key` (one HMAC per token minted).

    Args:
        mesh_key: the cluster's 32-byte `mesh_key`.
    """

    def __init__(self, mesh_key: bytes) -> None:
        self._key = tag_key(mesh_key)

    def tag(self, home: str) -> str:
        """`home`'s tag (`home_tag`)."""
        return home_tag(self._key, home)


def holder_here(instance_id: str, online: Callable[[str], bool]) -> Callable[[str], str | None]:
    """`McpService`'s `holder`: home -> `instance_id` while the home's uplink is connected
    here (`online`, the door's), else None (the answer then names no holder)."""

    def holder(home: str) -> str | None:
        return instance_id if online(home) else None

    return holder


def named_holder(resp: HttpResponse, holder: str | None) -> HttpResponse:
    """`resp` with `HOLDER_HEADER` naming `holder` (None: `resp` as it is). The headers are
    copied, never changed in place: a response's headers may be a shared constant."""
    if holder is not None:
        resp.headers = {**resp.headers, HOLDER_HEADER: holder}
    return resp
