""" "Don't allow" as an attacker and a stale page send it: raw form posts to `/authorize`."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx2

from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import authorize_params, form_fields, pkce

REDIRECT = "http://127.0.0.1:9/callback"


async def test_deny_needs_the_form_token_and_ends_the_request(env: Env) -> None:
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        reg = (await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})).json()
        _, challenge = pkce()
        page = await http.get(
            base + "/authorize",
            params=authorize_params(reg["client_id"], REDIRECT, challenge, "s1"),
        )
        fields = form_fields(page.text)
        forged = await http.post(
            base + "/authorize", data=fields | {"csrf": "forged", "decision": "deny"}
        )
        assert forged.status_code == 400 and "location" not in forged.headers
        assert forged.headers["content-type"].startswith("text/html")
        unknown = await http.post(
            base + "/authorize", data={"req": "nope", "csrf": "x", "decision": "deny"}
        )
        assert unknown.status_code == 400 and "location" not in unknown.headers
        denied = await http.post(base + "/authorize", data=fields | {"decision": "deny"})
        assert denied.status_code == 303
        location = urlsplit(denied.headers["location"])
        assert location.geturl().startswith(REDIRECT)
        query = parse_qs(location.query)
        assert query["error"] == ["access_denied"] and query["state"] == ["s1"]
        # the request has ended: the same form again, or a code, is refused without a redirect
        again = await http.post(base + "/authorize", data=fields | {"decision": "deny"})
        assert again.status_code == 400 and "location" not in again.headers
        code = await http.post(base + "/authorize", data=fields | {"code": "AAAA-AAAA"})
        assert code.status_code == 400 and "location" not in code.headers
