"""The person at the browser and the assistant's OAuth sign-in, played for the demo and the
tests: the consent page, the home's claim code typed in, the waiting page while the owner
approves at home (docs/auth.md), and the official `mcp` client's OAuth provider around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from devtools.rig import WAIT_S, console

DEMO_REDIRECT = "http://127.0.0.1:9/callback"
"""Where the scripted assistant says it listens for the OAuth redirect (never contacted)."""


@dataclass(frozen=True, slots=True)
class Consent:
    """What the person saw and where the browser ended: the consent page (HTML and headers)
    and the redirect to the client (its URL and query)."""

    page: str
    page_headers: dict[str, str]
    location: str
    query: dict[str, list[str]]


async def consent_as_person(
    base_url: str, authorize_url: str, console_port: int, home: str
) -> Consent:
    """Play the person at the browser: open the consent page, type the code the home shows,
    and follow the waiting page while the owner approves at home.

    Raises:
        RuntimeError: any step answered other than the flow says (page 200, post 303, waiting
            page 200 that reloads itself, then 303 to the client).
    """
    import re
    from urllib.parse import parse_qs, urlsplit

    import httpx2

    async with httpx2.AsyncClient(follow_redirects=False, timeout=20) as http:
        page = await http.get(authorize_url)
        req = re.search(r'name="req" value="([^"]+)"', page.text)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        if page.status_code != 200 or req is None or csrf is None:
            raise RuntimeError(
                f"the consent page did not open: {page.status_code} {page.text[:200]}"
            )
        code = (await console(console_port, {"op": "claim", "home": home}))["code"]
        print(
            f"  the home shows claim code {code}; the person types it; the owner approves at home"
        )
        r = await http.post(
            base_url + "/authorize", data={"req": req.group(1), "csrf": csrf.group(1), "code": code}
        )
        if r.status_code != 303:
            raise RuntimeError(f"the claim was not taken: {r.status_code} {r.text[:200]}")
        wait_url = base_url + r.headers["location"]
        with trio.fail_after(WAIT_S):
            while True:
                r = await http.get(wait_url)
                if r.status_code == 303:
                    break
                if r.status_code != 200 or 'http-equiv="refresh"' not in r.text:
                    raise RuntimeError(f"the waiting page broke: {r.status_code} {r.text[:200]}")
                await trio.sleep(0.1)  # the page reloads itself every 2 s; a script is quicker
        location = r.headers["location"]
        return Consent(page.text, dict(page.headers), location, parse_qs(urlsplit(location).query))


class MemoryTokenStorage:
    """The `mcp` client's token storage, kept in memory (the demo's and the tests' assistant)."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client_info: Any) -> None:
        self.client = client_info


async def oauth_sign_in(base_url: str, mcp_url: str, console_port: int, home: str) -> Any:
    """The official `mcp` client's OAuth provider, signing in through the bridge with the person
    played by `consent_as_person`. Returns the provider (an httpx2 auth); once it signed in,
    `demo_storage` holds its tokens and `demo_consents` what the person saw."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientMetadata,
    )
    from pydantic import AnyUrl

    answer: dict[str, list[str]] = {}
    consents: list[Consent] = []

    async def redirect_handler(url: str) -> None:
        consents.append(await consent_as_person(base_url, url, console_port, home))
        answer.update(consents[-1].query)

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=answer["code"][0], state=answer["state"][0], iss=answer.get("iss", [None])[0]
        )

    meta = OAuthClientMetadata(
        redirect_uris=[AnyUrl(DEMO_REDIRECT)],
        client_name="Demo assistant",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = MemoryTokenStorage()
    provider = OAuthClientProvider(
        server_url=mcp_url,
        client_metadata=meta,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    provider.demo_storage = storage  # type: ignore[attr-defined]
    provider.demo_consents = consents  # type: ignore[attr-defined]
    return provider
