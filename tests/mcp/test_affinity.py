"""Home tags in access tokens and the holder's header (`ftwbridge/mcp/affinity.py`;
docs/operations.md, "Calls at the holder"): what the balancer keys on and learns from.

Pinned: a tag is the same for every token of one home and differs between homes and keys; it
tells nothing without the key; the token keeps its random bits and is checked as before (a
token with an altered tag is unknown); untagged tokens, and text an attacker sends in the
token's place, read as untagged; an answer names the holder only for a home held here, and
never to a request whose token was refused.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from ftwbridge.mcp.affinity import (
    HOLDER_HEADER,
    SEPARATOR,
    TAG_CHARS,
    HomeTags,
    holder_here,
    home_tag,
    tag_key,
    tag_of,
    tagged_token,
)
from ftwbridge.mcp.auth import TokenCache, TokenMinter
from ftwbridge.mcp.server import McpService
from ftwbridge.store import TokenRecord, hash_token
from tests.mcp.test_service import RECORD, RESOURCE, FakeHomes, call, send

MESH_KEY = bytes(range(32))
B64URL = re.compile(r"[A-Za-z0-9_-]+")


def test_a_tag_is_one_per_home_and_key() -> None:
    tags = HomeTags(MESH_KEY)
    assert tags.tag("home-1") == tags.tag("home-1") == HomeTags(MESH_KEY).tag("home-1")
    assert tags.tag("home-1") != tags.tag("home-2")
    assert HomeTags(bytes(32)).tag("home-1") != tags.tag("home-1")
    for home in ("home-1", "", "h\u00e9me", "x" * 300):
        tag = tags.tag(home)
        assert len(tag) == TAG_CHARS and B64URL.fullmatch(tag)


def test_the_tag_key_is_its_own() -> None:
    """Drawn from `mesh_key` with a label: neither `mesh_key` itself nor a tag under it."""
    key = tag_key(MESH_KEY)
    assert len(key) == 32 and key != MESH_KEY
    assert (
        home_tag(MESH_KEY, "home-1") != home_tag(key, "home-1") == HomeTags(MESH_KEY).tag("home-1")
    )


def test_a_tagged_token_keeps_its_random_bits() -> None:
    tag = HomeTags(MESH_KEY).tag("home-1")
    tokens = {tagged_token(tag) for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        head, sep, secret = token.partition(SEPARATOR)
        assert (head, sep) == (tag, SEPARATOR)
        assert len(base64.urlsafe_b64decode(secret + "=")) == 32
        assert tag_of(token) == tag


def test_untagged_and_hostile_tokens_read_as_untagged() -> None:
    assert tag_of("mXq0V1" * 7 + "a") is None  # 43 base64url characters: a token of before
    for text in (
        "",
        ".",
        "abcdefghijkl.",  # no secret
        "abcdefghijk.secret",  # 11 characters
        "abcdefghijklm.secret",  # 13
        "abcdefghijk=.secret",
        "abcdefghijkl.sec ret",
        "abcdefghijkl.secret\r\nx",
        "abcdefghijkl.sec.ret",
        "abcdefghijkl\x00.secret",
        "\u0430bcdefghijkl.secret",  # a Cyrillic a
    ):
        assert tag_of(text) is None, text
    assert tag_of("abcdefghijkl.s") == "abcdefghijkl"


async def test_minted_tokens_are_tagged_and_checked_as_before() -> None:
    held: dict[bytes, TokenRecord] = {}

    async def put(digest: bytes, record: TokenRecord) -> None:
        held[digest] = record

    async def lookup(digest: bytes) -> TokenRecord | None:
        return held.get(digest)

    tags = HomeTags(MESH_KEY)
    minter = TokenMinter(
        put=put, resource=lambda: RESOURCE, ttl_s=3600, wall_ms=lambda: 0, tag=tags.tag
    )
    token = await minter.mint("home-1", b"k" * 32, "a1", ("ftw.live.read",), "c")
    assert tag_of(token) == tags.tag("home-1")
    assert set(held) == {hash_token(token)}  # only the SHA-256 of the whole text is kept
    cache = TokenCache(lookup)
    found = await cache.verify(token)
    assert found is not None and found.home == "home-1"
    other = tags.tag("home-2") + token[TAG_CHARS:]  # another home's tag on the same secret
    assert await cache.verify(other) is None
    plain = TokenMinter(put=put, resource=lambda: RESOURCE, ttl_s=3600, wall_ms=lambda: 0)
    assert tag_of(await plain.mint("home-1", b"k" * 32, "a1", (), "c")) is None


def held_service(online: set[str]) -> McpService:
    async def verify(token: str) -> TokenRecord | None:
        return RECORD if token == "good" else None

    return McpService(
        homes=FakeHomes({"ok": True}),
        verify_token=verify,
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=5,
        wall_ms=lambda: 1000,
        holder=holder_here("b2", online.__contains__),
    )


async def answer(svc: McpService, headers: dict[str, str] | None = None) -> Any:
    body, hs = call("homes_list", {})
    return await send(svc, json.dumps(body).encode(), hs | (headers or {}))


async def test_an_answer_names_the_holder_of_a_home_held_here() -> None:
    resp = await answer(held_service({RECORD.home}))
    assert resp.status == 200 and resp.headers[HOLDER_HEADER] == "b2"
    # a refusal past the token check names it too: the balancer learns from every answer
    resp = await answer(held_service({RECORD.home}), {"mcp-name": "status"})
    assert resp.status == 400 and resp.headers[HOLDER_HEADER] == "b2"


async def test_no_holder_is_named_elsewhere_or_to_a_stranger() -> None:
    resp = await answer(held_service(set()))  # the uplink is not here
    assert resp.status == 200 and HOLDER_HEADER not in resp.headers
    resp = await answer(held_service({RECORD.home}), {"authorization": "Bearer wrong"})
    assert resp.status == 401 and HOLDER_HEADER not in resp.headers
    resp = await answer(held_service({RECORD.home}), {"authorization": "Bearer " + "a" * 5000})
    assert resp.status == 401 and HOLDER_HEADER not in resp.headers
