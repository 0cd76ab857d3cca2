"""Per-address limits (docs/auth.md, "Limits that strangers cannot fill"): who the client is behind trusted proxies, the limits'
rules (their buckets: tests/store/test_limits.py), and the bridge refusing one address while
another still gets through."""

from __future__ import annotations

import httpx2
import pytest

from ftwbridge.oauth.limits import OAuthLimits, client_address, trusted_networks
from ftwbridge.oauth.model import (
    GUESS_ADDRESS_BURST,
    GUESS_BURST,
    GUESS_PER_S,
    REGISTER_ADDRESS_BURST,
    OAuthError,
)
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import authorize_params, form_fields, pkce
from tests.oauth.test_flow import REDIRECT

PROXIES = trusted_networks(["10.0.0.0/8", "fd00::/8"])


def test_client_address_believes_only_trusted_proxies() -> None:
    # no proxy trusted: the header is the client's own words, ignored
    assert client_address("198.51.100.7", ["1.2.3.4"], ()) == "198.51.100.7"
    # a trusted proxy: the rightmost hop it did not add itself
    assert client_address("10.0.0.2", ["1.2.3.4, 203.0.113.9"], PROXIES) == "203.0.113.9"
    assert (
        client_address("10.0.0.2", ["1.2.3.4", "203.0.113.9, 10.0.0.3"], PROXIES) == "203.0.113.9"
    )
    # a forged header from an untrusted peer changes nothing
    assert client_address("198.51.100.7", ["10.0.0.9"], PROXIES) == "198.51.100.7"
    # garbage in the chain stops the walk: the key is not something the client picked freely
    assert client_address("10.0.0.2", ["203.0.113.9, not-an-ip"], PROXIES) == "unknown"
    assert client_address("10.0.0.2", [], PROXIES) == "10.0.0.2"  # the proxy itself
    assert client_address(None, ["1.2.3.4"], PROXIES) == "unknown"
    # IPv6 counts per /64; ports and brackets are tolerated; v4-mapped is v4
    assert client_address("2001:db8:1:2:aaaa::1", [], ()) == "2001:db8:1:2::/64"
    assert client_address("fd00::1", ["[2001:db8:1:2::9]:443"], PROXIES) == "2001:db8:1:2::/64"
    assert client_address("::ffff:203.0.113.5", [], ()) == "203.0.113.5"
    assert client_address("10.0.0.2", ["203.0.113.9:5555"], PROXIES) == "203.0.113.9"
    with pytest.raises(ValueError):
        trusted_networks(["10.0.0.0/8", "proxy.example"])


async def test_oauth_limits_count_wrong_guesses_only_and_per_address() -> None:
    """The limits' rules on the in-memory buckets (one process), on explicit ms."""
    limits = OAuthLimits(object())  # no PostgreSQL store: buckets in memory
    t = 1_000_000
    for n in range(GUESS_BURST):
        await limits.guess(f"192.0.2.{n % 3}", t)  # 10 from each of three addresses
    with pytest.raises(OAuthError) as info:
        await limits.guess("192.0.2.0", t)  # that address spent its own 10
    assert info.value.status == 429 and "wrong codes" in info.value.description
    t += int(1000 / GUESS_PER_S)  # one guess for everyone refills
    with pytest.raises(OAuthError):
        await limits.guess("192.0.2.0", t)  # still past its own 10
    ticket = await limits.guess("192.0.2.9", t)  # another may use it
    await limits.right_guess(ticket, t)  # it was a right code: it is given back
    await limits.guess("192.0.2.8", t)
    for _ in range(REGISTER_ADDRESS_BURST):
        await limits.register("198.51.100.1", t)
    with pytest.raises(OAuthError) as info:
        await limits.register("198.51.100.1", t)
    assert info.value.status == 429 and "registrations" in info.value.description
    await limits.register("198.51.100.2", t)  # refused asks took nothing from everyone's


@pytest.mark.config(trusted_proxies=("127.0.0.1",))
async def test_limits_per_client_address_behind_a_trusted_proxy(env: Env) -> None:
    base = env.bridge.site.public_url
    home = await env.add_home("h1")

    def via(address: str) -> dict[str, str]:
        return {"x-forwarded-for": address}

    async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
        body = {"redirect_uris": [REDIRECT]}
        for _ in range(REGISTER_ADDRESS_BURST):
            r = await http.post(base + "/oauth/register", json=body, headers=via("203.0.113.1"))
            assert r.status_code == 201
        r = await http.post(base + "/oauth/register", json=body, headers=via("203.0.113.1"))
        assert r.status_code == 429 and r.json()["error"] == "temporarily_unavailable"
        r = await http.post(base + "/oauth/register", json=body, headers=via("203.0.113.2"))
        assert r.status_code == 201  # another address still registers
        client_id = r.json()["client_id"]
        _, challenge = pkce()
        params = authorize_params(client_id, REDIRECT, challenge)

        async def consent_form(address: str) -> dict[str, str]:
            page = await http.get(base + "/authorize", params=params, headers=via(address))
            assert page.status_code == 200
            return form_fields(page.text)

        # wrong claim codes: 10 from one address (two consent requests of 5), then refused
        for _ in range(GUESS_ADDRESS_BURST // 5):
            form = await consent_form("203.0.113.3")
            for i in range(5):
                await http.post(
                    base + "/authorize",
                    data=form | {"code": f"AAAA-AAA{i}"},
                    headers=via("203.0.113.3"),
                )
        form = await consent_form("203.0.113.3")
        r = await http.post(
            base + "/authorize", data=form | {"code": "AAAA-AAAA"}, headers=via("203.0.113.3")
        )
        assert r.status_code == 429 and "too many wrong codes" in r.text
        # the person at another address types the right code and is asked at home
        form = await consent_form("203.0.113.4")
        code = (await home.console(op="claim"))["code"]
        r = await http.post(
            base + "/authorize", data=form | {"code": code}, headers=via("203.0.113.4")
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/authorize/wait")
