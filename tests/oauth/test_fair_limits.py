"""Limits that strangers cannot fill (docs/auth.md): a limit counted for everyone never refuses
a first request, nor a right claim code, because of other sources' traffic. Each case runs
over real sockets from several loopback source addresses (127.0.0.2, 127.0.0.3, ...), with no
proxy in front, so the bridge keys its limits on the TCP peer."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import pytest
import trio

from ftwbridge.oauth import cimd
from ftwbridge.oauth.limits import OAuthLimits
from ftwbridge.oauth.model import (
    GUESS_ADDRESS_BURST,
    GUESS_BURST,
    GUESS_SHARE_BURST,
    MAX_CLAIM_TRIES,
    REGISTER_ADDRESS_BURST,
    REGISTER_BURST,
    REGISTER_SHARE_BURST,
    OAuthError,
)
from ftwbridge.oauth.shedding import Open, to_shed
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import authorize_params, form_fields, pkce
from tests.oauth.test_documents import documents_server
from tests.oauth.test_flow import REDIRECT

STRANGERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
PERSON = "127.0.0.9"


@asynccontextmanager
async def from_address(address: str) -> AsyncIterator[httpx2.AsyncClient]:
    """An HTTP client whose connections leave from `address` (any 127/8 address works)."""
    transport = httpx2.AsyncHTTPTransport(local_address=address)
    async with httpx2.AsyncClient(
        transport=transport, timeout=REAL_WAIT_S, follow_redirects=False
    ) as http:
        yield http


async def _register(http: httpx2.AsyncClient, base: str) -> httpx2.Response:
    return await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})


def test_to_shed_takes_the_heaviest_sources_oldest() -> None:
    held = [Open("a1", "A", 10), Open("a2", "A", 5), Open("b1", "B", 1), Open("c1", "C", 2)]
    assert to_shed(held, "new") == Open("a2", "A", 5)  # A holds the most: its oldest
    assert to_shed(held, "B") == Open("a2", "A", 5)
    assert to_shed(held, "A") is None  # the heaviest itself asks: its ask is refused
    assert to_shed([Open("b1", "B", 1), Open("c1", "C", 2)], "new") == Open("b1", "B", 1)
    assert to_shed([], "new") is None
    assert to_shed([Open("x", "A", 1)], "A") is None


async def test_spent_limits_for_everyone_still_hear_a_new_address() -> None:
    """The rules on the in-memory buckets, on explicit ms."""
    limits = OAuthLimits(object())
    t = 1_000_000
    for n in range(GUESS_BURST):  # strangers spend the limit for everyone
        await limits.guess(f"192.0.2.{n % 3}", t)
    for _ in range(GUESS_SHARE_BURST):  # a new address still has its share
        await limits.guess("192.0.2.9", t)
    with pytest.raises(OAuthError) as info:
        await limits.guess("192.0.2.9", t)  # then it is one of the heavy ones
    assert info.value.status == 429
    with pytest.raises(OAuthError):
        await limits.guess("192.0.2.0", t)  # a stranger past its own limit stays refused
    ticket = await limits.guess("192.0.2.7", t)
    await limits.right_guess(ticket, t)  # a right code is given back, share included
    for _ in range(GUESS_SHARE_BURST):
        await limits.guess("192.0.2.7", t)


async def test_strangers_cannot_use_up_registrations(env: Env) -> None:
    base = env.bridge.site.public_url
    per = REGISTER_BURST // len(STRANGERS)
    assert per <= REGISTER_ADDRESS_BURST
    for address in STRANGERS:
        async with from_address(address) as http:
            for _ in range(per):
                assert (await _register(http, base)).status_code == 201
    async with from_address(STRANGERS[0]) as http:  # the heaviest: now past its share
        for _ in range(REGISTER_SHARE_BURST):
            await _register(http, base)
        r = await _register(http, base)
        assert r.status_code == 429 and r.json()["error"] == "temporarily_unavailable"
    async with from_address(PERSON) as http:  # a first registration gets through
        assert (await _register(http, base)).status_code == 201


async def test_strangers_wrong_codes_do_not_refuse_a_right_one(env: Env) -> None:
    base = env.bridge.site.public_url
    home = await env.add_home("h1")
    async with from_address(PERSON) as http:
        client_id = (await _register(http, base)).json()["client_id"]
    _, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge)
    assert len(STRANGERS) * GUESS_ADDRESS_BURST == GUESS_BURST
    for address in STRANGERS:  # together they spend the wrong codes allowed for everyone
        async with from_address(address) as http:
            for _ in range(GUESS_ADDRESS_BURST // MAX_CLAIM_TRIES):
                page = await http.get(base + "/authorize", params=params)
                form = form_fields(page.text)
                for i in range(MAX_CLAIM_TRIES):
                    r = await http.post(base + "/authorize", data=form | {"code": f"AAAA-AAA{i}"})
                    assert r.status_code != 429
            page = await http.get(base + "/authorize", params=params)
            r = await http.post(
                base + "/authorize", data=form_fields(page.text) | {"code": "AAAA-AAAA"}
            )
            assert r.status_code == 429 and "too many wrong codes" in r.text
    async with from_address(PERSON) as http:
        page = await http.get(base + "/authorize", params=params)
        code = (await home.console(op="claim"))["code"]
        r = await http.post(base + "/authorize", data=form_fields(page.text) | {"code": code})
        assert r.status_code == 303 and r.headers["location"].startswith("/authorize/wait")


async def test_strangers_cannot_hold_every_consent_request(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ftwbridge.oauth.service.MAX_PENDING", 4)
    base = env.bridge.site.public_url
    async with from_address(PERSON) as http:
        client_id = (await _register(http, base)).json()["client_id"]
    _, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge)
    forms = []
    async with from_address(STRANGERS[0]) as http:
        for _ in range(3):
            forms.append(form_fields((await http.get(base + "/authorize", params=params)).text))
    async with from_address(STRANGERS[1]) as http:
        assert (await http.get(base + "/authorize", params=params)).status_code == 200
    async with from_address(PERSON) as http:  # full: the heaviest source's oldest goes
        page = await http.get(base + "/authorize", params=params)
        assert page.status_code == 200
        assert form_fields(page.text)["req"]
    async with from_address(STRANGERS[0]) as http:
        r = await http.post(base + "/authorize", data=forms[0] | {"code": "AAAA-AAAA"})
        assert "unknown or has expired" in r.text  # its oldest was the one shed
        r = await http.post(base + "/authorize", data=forms[1] | {"code": "AAAA-AAAA"})
        assert "not one a home is showing" in r.text  # the others stay
        # it now holds 2, more than any other source: its own ask is the one refused
        r = await http.get(base + "/authorize", params=params)
        assert r.status_code == 429 and "from your address" in r.text
    async with from_address(STRANGERS[1]) as http:  # 1 open: the heaviest (2) gives way
        assert (await http.get(base + "/authorize", params=params)).status_code == 200


async def _silent_server(nursery: trio.Nursery, full: int, on_full: trio.Event) -> int:
    """A document host that accepts and never answers (a stranger's slow document); sets
    `on_full` once `full` fetches are connected to it."""
    held = 0

    async def hold(stream: trio.SocketStream) -> None:
        nonlocal held
        held += 1
        if held == full:
            on_full.set()
        async with stream:
            await trio.sleep_forever()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, hold, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


@pytest.mark.config(test_loopback_metadata=True)
async def test_strangers_slow_documents_do_not_hold_every_fetch(
    nursery: trio.Nursery, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cimd, "FETCH_S", 4 * REAL_WAIT_S)  # the slow ones outlast the test
    base = env.bridge.site.public_url
    docs = await documents_server(nursery)
    all_held = trio.Event()
    slow = await _silent_server(nursery, cimd.MAX_FETCHES, all_held)
    _, challenge = pkce()

    async def stranger(address: str, n: int) -> None:
        client_id = f"http://127.0.0.1:{slow}/{address}-{n}.json"
        async with from_address(address) as http:
            await http.get(
                base + "/authorize", params=authorize_params(client_id, REDIRECT, challenge)
            )

    async with trio.open_nursery() as strangers:
        sources = [f"127.0.0.{n}" for n in range(2, 2 + cimd.MAX_FETCHES // 2)]
        for address in sources:  # together they hold every fetch the bridge makes at once
            for n in range(2):
                strangers.start_soon(stranger, address, n)
        with trio.fail_after(REAL_WAIT_S):
            await all_held.wait()
        with trio.fail_after(REAL_WAIT_S):  # far less than the slow fetches take
            async with from_address(PERSON) as http:
                params = authorize_params(f"{docs}/good.json", REDIRECT, challenge)
                page = await http.get(base + "/authorize", params=params)
        assert page.status_code == 200 and "Doc &lt;client&gt;" in page.text
        strangers.cancel_scope.cancel()
