"""Every row of the clients' table completes the whole flow against one real bridge and stub
home: registration as the client sends it, `/authorize` with its parameters, consent by the
claim code with approval at home, the code exchange, a call to `status`, and one refresh.

One bridge and one home serve all rows (they are independent sign-ins of different clients),
and every row runs even when an earlier one fails, so one run reports all that broke."""

from __future__ import annotations

from typing import Any

import httpx2
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from devtools.signin import MemoryTokenStorage, consent_as_person
from tests.e2e.env import REAL_WAIT_S, Env, Home
from tests.oauth.clients.table import ROWS, ClientRow
from tests.oauth.helpers import authorize_params, pkce
from tests.oauth.test_flow import sdk_provider

WHERE = {
    "app": "an app on your device",
    "loopback": "a program on your device",
    "https": "returns to <code>",
}


async def status_with(env: Env, access_token: str) -> dict[str, Any]:
    """`status` read with `access_token` by the official client; its structured result."""
    headers = {"authorization": f"Bearer {access_token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=REAL_WAIT_S) as http,
        Client(streamable_http_client(env.url, http_client=http), mode="2026-07-28") as client,
    ):
        result = await client.call_tool("status", {})
    assert not result.is_error and result.structured_content is not None
    return result.structured_content


async def complete(env: Env, home: Home, row: ClientRow, http: httpx2.AsyncClient) -> None:
    """One row's whole flow; raises AssertionError at the first step that differs."""
    base = env.bridge.site.public_url
    reg = await http.post(base + "/oauth/register", json=row.register)
    assert reg.status_code == 201, reg.text
    kept = reg.json()
    assert kept["token_endpoint_auth_method"] == "none" and "client_secret" not in kept
    assert kept["redirect_uris"] == row.register["redirect_uris"]
    assert set(kept["grant_types"]) == {"authorization_code", "refresh_token"}
    verifier, challenge = pkce()
    params = authorize_params(
        kept["client_id"], row.authorize_redirect, challenge, "st-" + row.name[:8]
    )
    params |= row.authorize_extra
    if row.sends_resource:
        params["resource"] = env.url
    url = str(httpx2.URL(base + "/authorize", params=params))
    seen = await consent_as_person(base, url, home.console_port, home.name)
    assert WHERE[row.kind] in seen.page, seen.page
    assert seen.location.startswith(row.authorize_redirect + "?"), seen.location
    assert seen.query["state"] == [params["state"]] and seen.query["iss"] == [base]
    form = {
        "grant_type": "authorization_code",
        "code": seen.query["code"][0],
        "client_id": kept["client_id"],
        "redirect_uri": row.authorize_redirect,
        "code_verifier": verifier,
    }
    if row.sends_resource:
        form["resource"] = env.url
    token = await http.post(base + "/oauth/token", data=form)
    assert token.status_code == 200, token.text
    tokens = token.json()
    assert "fields" in await status_with(env, tokens["access_token"])
    refreshed = await http.post(
        base + "/oauth/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": kept["client_id"],
        },
    )
    assert refreshed.status_code == 200, refreshed.text


async def python_sdk_row(env: Env, home: Home) -> None:
    """The official Python SDK's own provider, with the metadata of its simple-auth-client
    example (`client_secret_post`): discovery from the 401, registration, PKCE, consent,
    code exchange, then `status`."""
    meta = OAuthClientMetadata(
        client_name="Simple Auth Client",
        redirect_uris=["http://localhost:3030/callback"],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_post",
    )
    storage = MemoryTokenStorage()
    provider = sdk_provider(env, home, meta, storage, {})
    async with (
        httpx2.AsyncClient(auth=provider, timeout=REAL_WAIT_S) as http,
        Client(streamable_http_client(env.url, http_client=http), mode="2026-07-28") as client,
    ):
        result = await client.call_tool("status", {})
    assert not result.is_error
    assert storage.client.token_endpoint_auth_method == "none"


async def test_every_client_in_the_table_completes_the_flow(env: Env) -> None:
    home = await env.add_home("h1", "--approve-all")
    failed: dict[str, str] = {}
    with trio.fail_after(REAL_WAIT_S * 3):
        async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
            for row in ROWS:
                try:
                    await complete(env, home, row, http)
                except (AssertionError, RuntimeError, KeyError) as exc:
                    failed[row.name] = f"{type(exc).__name__}: {exc}"[:400]
        try:
            await python_sdk_row(env, home)
        except (AssertionError, RuntimeError, KeyError) as exc:
            failed["Python SDK"] = f"{type(exc).__name__}: {exc}"[:400]
    assert not failed, failed
