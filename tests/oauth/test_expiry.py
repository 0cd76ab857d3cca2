"""The token endpoint's `expires_in` is the configured access-token lifetime:
`token_ttl_s` (`FTWBRIDGE_TOKEN_TTL_S`), on the code exchange and on every refresh, and the
token does stop working when it says."""

from __future__ import annotations

import httpx2
import pytest

from ftwbridge.oauth.tokens import expires_in_s
from ftwbridge.store import hash_token
from tests.e2e.env import Env
from tests.oauth.test_flow import REDIRECT, signed_in


@pytest.mark.config(token_ttl_s=900)
async def test_expires_in_is_the_configured_lifetime(env: Env) -> None:
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
        first = await http.post(token_url, data=form)
        assert first.status_code == 200 and first.json()["expires_in"] == 900
        held = await env.bridge.store.token(hash_token(first.json()["access_token"]))
        assert held is not None and abs(held.expires_at_ms - env.bridge.clock() - 900_000) < 5_000
        again = await http.post(
            token_url,
            data={
                "grant_type": "refresh_token",
                "refresh_token": first.json()["refresh_token"],
                "client_id": client_id,
                "resource": env.url,
            },
        )
        assert again.status_code == 200 and again.json()["expires_in"] == 900


def test_expires_in_rounds_to_whole_seconds_and_never_goes_below_zero() -> None:
    assert expires_in_s(1_000_000 + 900_000, 1_000_000) == 900
    assert expires_in_s(1_000_000 + 900_000, 1_000_004) == 900  # a few ms spent minting
    assert expires_in_s(1_000_000 + 900_000, 1_000_600) == 899
    assert expires_in_s(5, 10) == 0
