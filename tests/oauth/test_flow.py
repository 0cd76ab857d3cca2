"""OAuth end to end: the official `mcp` client's OAuthClientProvider signs in through the
bridge (registration, PKCE, the consent page, the home's claim code, approval at home, code,
token) and then reads `status`; and the refusals of the token endpoint, one by one."""

from __future__ import annotations

from typing import Any

import httpx2
import trio
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientMetadata,
)

from devtools.signin import MemoryTokenStorage, consent_as_person
from tests.e2e.env import REAL_WAIT_S, Env, Home
from tests.oauth.helpers import authorize_params, form_fields, pkce

REDIRECT = "http://127.0.0.1:9/callback"


async def person_consents(
    env: Env, home: Home, authorize_url: str
) -> tuple[dict[str, list[str]], str]:
    """What a person does in the browser (`devtools.signin.consent_as_person`, which checks each
    step), plus the page's headers. Returns (the redirect's query, the consent page's HTML)."""
    seen = await consent_as_person(
        env.bridge.site.public_url, authorize_url, home.console_port, home.name
    )
    headers = seen.page_headers
    assert (
        headers["x-frame-options"] == "DENY"
        and "frame-ancestors 'none'" in headers["content-security-policy"]
    )
    assert seen.location.startswith(REDIRECT)
    return seen.query, seen.page


async def mcp_status(http: httpx2.AsyncClient, env: Env, token: str) -> int:
    """The HTTP status of an (empty) request to /mcp with `token`: 401 once it stops working."""
    r = await http.post(
        env.url,
        json={},
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    return r.status_code


def sdk_provider(
    env: Env,
    home: Home,
    meta: OAuthClientMetadata,
    storage: MemoryTokenStorage,
    got: dict[str, Any],
) -> OAuthClientProvider:
    """The official Python SDK's OAuth provider, with the person at the browser played by
    `person_consents` (what it saw lands in `got`: the redirect's query and the page)."""
    redirect = str(meta.redirect_uris[0]) if meta.redirect_uris else ""

    async def redirect_handler(url: str) -> None:
        seen = await consent_as_person(
            env.bridge.site.public_url, url, home.console_port, home.name
        )
        assert seen.location.startswith(redirect), seen.location
        got.update(query=seen.query, page=seen.page, headers=seen.page_headers)

    async def callback_handler() -> AuthorizationCodeResult:
        q = got["query"]
        return AuthorizationCodeResult(
            code=q["code"][0], state=q["state"][0], iss=q.get("iss", [None])[0]
        )

    return OAuthClientProvider(
        server_url=env.url,
        client_metadata=meta,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )


async def test_sdk_oauth_flow_then_status(env: Env) -> None:
    home = await env.add_home("h1", "--approve-all")
    got: dict[str, Any] = {}
    meta = OAuthClientMetadata(
        redirect_uris=[REDIRECT],  # type: ignore[list-item]
        client_name="<script>alert(1)</script>\u202eEvil\u200b" + "x" * 200,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = MemoryTokenStorage()
    provider = sdk_provider(env, home, meta, storage, got)
    async with (
        httpx2.AsyncClient(auth=provider, timeout=30) as http,
        Client(streamable_http_client(env.url, http_client=http), mode="2026-07-28") as client,
    ):
        with trio.fail_after(60):
            result = await client.call_tool("status", {})
    assert not result.is_error and result.structured_content is not None
    assert "fields" in result.structured_content
    page = got["page"]
    assert got["headers"]["x-frame-options"] == "DENY"
    assert (
        "<script>" not in page and "&lt;script&gt;" in page and "\u202e" not in page and "…" in page
    )
    assert storage.tokens is not None and storage.tokens.refresh_token
    # after the owner drops the agent at home, access and refresh tokens stop at once
    roster = await env.bridge.door.roster("h1")
    assert roster is not None
    [key] = list(roster.agents())
    await home.console(op="drop_agent", key=key.hex())
    with trio.fail_after(REAL_WAIT_S):
        await env.bridge.door.wait_roster("h1", lambda r: key not in r.agents())
    async with httpx2.AsyncClient() as http:
        assert await mcp_status(http, env, storage.tokens.access_token) == 401
        t = await http.post(
            env.bridge.site.public_url + "/oauth/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": storage.tokens.refresh_token,
                "client_id": storage.client.client_id,
            },
        )
        assert t.status_code == 400 and t.json()["error"] == "invalid_grant"


async def signed_in(env: Env, home: Home, http: httpx2.AsyncClient) -> tuple[str, str, str, str]:
    """Register, authorize and consent; returns (client_id, verifier, code, token URL)."""
    base = env.bridge.site.public_url
    reg = await http.post(
        base + "/oauth/register",
        json={
            "redirect_uris": [REDIRECT],
            "client_name": "t",
            "token_endpoint_auth_method": "none",
        },
    )
    assert reg.status_code == 201, reg.text
    client_id = reg.json()["client_id"]
    verifier, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge) | {"resource": env.url}
    url = httpx2.URL(base + "/authorize", params=params)
    query, _ = await person_consents(env, home, str(url))
    assert query["state"] == ["s1"] and query["iss"] == [base]
    return client_id, verifier, query["code"][0], base + "/oauth/token"


async def test_token_endpoint_refusals(env: Env) -> None:
    home = await env.add_home("h1", "--approve-all")
    async with httpx2.AsyncClient(timeout=20) as http:
        client_id, verifier, code, token_url = await signed_in(env, home, http)
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
            "resource": env.url,
        }
        for bad in (
            {"code_verifier": "x" * 43},
            {"code_verifier": ""},
            {"redirect_uri": REDIRECT + "/"},
            {"redirect_uri": "http://127.0.0.1:10/callback"},
            {"resource": "https://elsewhere.example/mcp"},
        ):
            r = await http.post(token_url, data=form | bad)
            assert r.status_code == 400 and r.json()["error"] in (
                "invalid_grant",
                "invalid_target",
                "invalid_request",  # the empty verifier counts as omitted (RFC 6749 3.1)
            ), (bad, r.text)
        ok = await http.post(token_url, data=form)
        assert (
            ok.status_code == 200
            and ok.json()["token_type"] == "Bearer"
            and ok.json()["expires_in"] == 3600
        )
        tokens = ok.json()
        assert ok.headers["cache-control"] == "no-store"
        again = await http.post(token_url, data=form)  # code reuse: refused, and its tokens revoked
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
        assert await mcp_status(http, env, tokens["access_token"]) == 401
        # a fresh sign-in; then refresh rotation, and reuse of an old refresh token revokes the family
        client_id, verifier, code, token_url = await signed_in(env, home, http)
        first = (
            await http.post(
                token_url,
                data=form | {"code": code, "client_id": client_id, "code_verifier": verifier},
            )
        ).json()

        async def refresh(token: str) -> httpx2.Response:
            return await http.post(
                token_url,
                data={
                    "grant_type": "refresh_token",
                    "refresh_token": token,
                    "client_id": client_id,
                },
            )

        second = await refresh(first["refresh_token"])
        assert (
            second.status_code == 200 and second.json()["refresh_token"] != first["refresh_token"]
        )
        # a repeat within the grace window (a lost answer, another tab) gets the same pair
        repeat = await refresh(first["refresh_token"])
        assert repeat.status_code == 200 and repeat.json() == second.json()
        # using the new refresh token closes the old one's window: a reuse now revokes all
        third = await refresh(second.json()["refresh_token"])
        assert third.status_code == 200
        reuse = await refresh(first["refresh_token"])
        assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
        assert (await refresh(third.json()["refresh_token"])).status_code == 400  # family gone
        assert await mcp_status(http, env, third.json()["access_token"]) == 401


async def test_authorize_refusals(env: Env) -> None:
    home = await env.add_home("h1")
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=20, follow_redirects=False) as http:
        for body in (
            {"redirect_uris": ["https://evil.example;frame-ancestors */cb"]},  # CSP injection
            {"redirect_uris": ["https://claude.ai@evil.example/cb"]},  # user info hides the host
            {"redirect_uris": ["http://127.0.0.1:9/cb\r\nSet-Cookie: x=1"]},
            {"redirect_uris": ["https://ex\u202eample.com/cb"]},
            {"redirect_uris": ["http://127.0.0.1:99999/cb"]},
            {"redirect_uris": ["http://evil.example/cb"]},
            {"redirect_uris": []},
            {"redirect_uris": ["https://x.example/cb#frag"]},
        ):
            r = await http.post(base + "/oauth/register", json=body)
            assert r.status_code == 400 and r.json()["error"] == "invalid_redirect_uri"
        reg = (await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})).json()
        _, challenge = pkce()
        good = authorize_params(reg["client_id"], REDIRECT, challenge, "z")
        # every refusal is a page, never a redirect: registration is open, so a redirect with
        # an error would make the bridge an open redirector
        for bad in [
            {"redirect_uri": "http://127.0.0.2:9/callback"},  # another host
            {"redirect_uri": "http://127.0.0.1:10/callback?x=1"},  # another query
            {"redirect_uri": REDIRECT + "/"},  # a trailing slash
            {"redirect_uri": "http://127.0.0.1:9/other"},  # another path
            {"client_id": "nobody"},
            {"code_challenge_method": "plain"},
            {"code_challenge": "short"},
            {"resource": "https://elsewhere.example/mcp"},
            {"scope": "ftw.mode.write"},  # the owner's alone (PROTOCOL.md part E)
            {"state": "s" * 600},
        ]:
            r = await http.get(base + "/authorize", params=good | bad)
            assert r.status_code == 400 and "location" not in r.headers, (bad, r.text)
            assert r.headers["x-frame-options"] == "DENY"
        # five wrong claim codes burn the request: the client hears access_denied
        page = await http.get(base + "/authorize", params=good)
        req, csrf = form_fields(page.text)["req"], form_fields(page.text)["csrf"]
        r = await http.post(
            base + "/authorize", data={"req": req, "csrf": "forged", "code": "AAAA-AAAA"}
        )
        assert r.status_code == 400
        for i in range(5):
            r = await http.post(
                base + "/authorize", data={"req": req, "csrf": csrf, "code": "AAAA-AAA" + str(i)}
            )
        assert r.status_code == 303 and "error=access_denied" in r.headers["location"]
        # a denial at home lands on the client with access_denied, and leaves no key behind
        page = await http.get(base + "/authorize", params=good)
        req, csrf = form_fields(page.text)["req"], form_fields(page.text)["csrf"]
        code = (await home.console(op="claim"))["code"]
        r = await http.post(base + "/authorize", data={"req": req, "csrf": csrf, "code": code})
        assert r.status_code == 303
        for _ in range(200):  # the box hears agent.request over its uplink (real sockets)
            if await home.console(op="requests"):
                break
            await trio.sleep(0.05)
        [pending] = await home.console(op="requests")
        await home.console(op="deny", req=pending["req"])
        with trio.fail_after(REAL_WAIT_S):
            while True:
                r = await http.get(base + f"/authorize/wait?req={req}")
                if r.status_code == 303:
                    break
                await trio.sleep(0.05)
        assert "error=access_denied" in r.headers["location"]
        assert not await env.bridge.keys.has(bytes.fromhex(pending["key"]))
        meta = (await http.get(base + "/.well-known/oauth-authorization-server")).json()
        assert meta["code_challenge_methods_supported"] == ["S256"] and meta["issuer"] == base


async def test_revocation_is_immediate_and_clients_cannot_burn_each_others_tokens(env: Env) -> None:
    home = await env.add_home("h1", "--approve-all")
    async with httpx2.AsyncClient(timeout=20) as http:
        client_id, verifier, code, token_url = await signed_in(env, home, http)
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": "é" * 43,
        }
        r = await http.post(token_url, data=form)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"  # not a 500
        tokens = (await http.post(token_url, data=form | {"code_verifier": verifier})).json()
        assert await mcp_status(http, env, tokens["access_token"]) == 400  # authenticated, bad body
        # another client's refresh attempt is refused without burning the token
        r = await http.post(
            token_url,
            data={
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": "someone-else",
            },
        )
        assert r.status_code == 400
        r = await http.post(
            token_url,
            data={
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": client_id,
            },
        )
        assert r.status_code == 200
        fresh = r.json()
        revoke_url = env.bridge.site.public_url + "/oauth/revoke"
        assert (await http.post(revoke_url, data={})).status_code == 400
        # revoking the refresh token stops its access tokens at once (no cache delay)
        assert await mcp_status(http, env, fresh["access_token"]) == 400
        assert (
            await http.post(revoke_url, data={"token": fresh["refresh_token"]})
        ).status_code == 200
        assert await mcp_status(http, env, fresh["access_token"]) == 401
