"""Per-address limits (issue 14, item 5): who the client is behind trusted proxies, the
buckets per address, and the bridge refusing one address while another still gets through."""

from __future__ import annotations

import httpx2
import pytest

from ftwbridge.oauth.limits import AddressLimit, client_address, trusted_networks
from ftwbridge.oauth.model import GUESS_ADDRESS_BURST, REGISTER_ADDRESS_BURST
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


def test_address_limit_buckets_are_per_address_and_bounded() -> None:
    limit = AddressLimit(2, 1.0, max_addresses=3)
    for _ in range(2):
        assert limit.wait_s("a", 0.0) == 0
        limit.charge("a", 0.0)
    assert limit.wait_s("a", 0.0) == pytest.approx(1.0)
    assert limit.wait_s("b", 0.0) == 0  # another address is untouched
    assert limit.wait_s("a", 1.0) == 0  # refilled, one a second
    for name in "bcd":
        limit.charge(name, 1.0)
    assert len(limit) == 3  # "a" was the least recently seen, and is forgotten


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
