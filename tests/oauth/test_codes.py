"""Codes expire after 60 s by the bridge's clock (the service alone, with a clock we move)."""

from __future__ import annotations

from typing import Any

import pytest

from ftwbridge.oauth import OAuthError, OAuthService, Pending
from ftwbridge.oauth.model import CODE_TTL_MS, CodeGrant
from ftwbridge.store import hash_token
from ftwbridge.store.sqlite import SqliteStore


class Nothing:
    pass


def service(now: list[int], *, keys: Any) -> OAuthService:
    """An OAuth service with an in-memory SQLite store and no door, on a clock the test moves
    (`now[0]`, ms)."""
    return OAuthService(
        store=SqliteStore(":memory:"),
        keys=keys,
        door=Nothing(),  # type: ignore[arg-type]
        issuer=lambda: "https://b",
        resource=lambda: "https://b/mcp",
        clock=lambda: now[0],
        issue_access=None,  # type: ignore[arg-type]
    )


async def test_an_expired_code_is_refused() -> None:
    now = [1_000_000]
    svc = service(now, keys=None)
    p = Pending(
        "r",
        "c",
        "n",
        "http://127.0.0.1:1/cb",
        "s",
        "x" * 43,
        ("ftw.live.read",),
        "t",
        now[0] + 1000,
        home="h",
        agent_key=b"k" * 32,
        status="approved",
        code="the-code",
    )
    await svc._save_code(hash_token("the-code"), CodeGrant(p, now[0] + CODE_TTL_MS))
    now[0] += CODE_TTL_MS
    with pytest.raises(OAuthError) as info:
        await svc.token(
            {
                "grant_type": "authorization_code",
                "code": "the-code",
                "client_id": "c",
                "redirect_uri": p.redirect_uri,
                "code_verifier": "v" * 43,
            }
        )
    assert info.value.error == "invalid_grant" and "expired" in info.value.description


async def test_an_expired_consent_request_drops_its_key() -> None:
    from ftwbridge.keys import KeysService

    now = [1_000_000]
    keys = KeysService(None)
    key = await keys.create("h")
    svc = service(now, keys=keys)
    p = Pending(
        "r",
        "c",
        "n",
        "http://127.0.0.1:1/cb",
        None,
        "x" * 43,
        (),
        "t",
        now[0] + 1000,
        home="h",
        agent_key=key,
        status="asked",
    )
    svc._pending[p.id] = p
    now[0] += 1000
    assert await svc.get("r") is None
    assert not await keys.has(key)  # a request that never completed leaves no key behind
