"""Pending consents, codes and claim offers survive a restart of the bridge.

Two bridges in turn on one state folder and one port, the stub home staying up and
reconnecting: a sign-in approved at home whose code had not yet reached its client, a consent
page opened before the restart and a claim code the home showed before it, both finish after
it. And expiry on load, on the real SQLite store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import trio

from devtools.rig import free_port
from ftwbridge.store.sqlite import SqliteStore
from tests.e2e.env import REAL_WAIT_S, Env, start_env
from tests.oauth.helpers import authorize_params, form_fields, pkce
from tests.oauth.test_flow import REDIRECT


async def until(condition: Callable[[], bool]) -> None:
    """Poll `condition` every 50 ms, within `REAL_WAIT_S` (a bound, not a measurement)."""
    for _ in range(int(REAL_WAIT_S / 0.05)):
        if condition():
            return
        await trio.sleep(0.05)
    raise AssertionError("the condition did not come true in time")


async def consent_page(http: httpx2.AsyncClient, base: str, client_id: str) -> dict[str, str]:
    """Open a consent request; returns its form fields and the PKCE verifier."""
    verifier, challenge = pkce()
    params = authorize_params(client_id, REDIRECT, challenge, "rs")
    page = await http.get(base + "/authorize", params=params)
    assert page.status_code == 200, page.text
    return form_fields(page.text) | {"v": verifier}


async def code_after_waiting(http: httpx2.AsyncClient, base: str, req: str) -> str:
    """Follow the waiting page until it redirects; the code it carries."""
    with trio.fail_after(REAL_WAIT_S):
        while True:
            r = await http.get(base + "/authorize/wait", params={"req": req})
            if r.status_code == 303:
                break
            assert r.status_code == 200, r.text
            await trio.sleep(0.05)
    location = r.headers["location"]
    assert location.startswith(REDIRECT) and "code=" in location, location
    return str(httpx2.URL(location).params["code"])


async def exchange(http: httpx2.AsyncClient, base: str, client_id: str, code: str, v: str) -> Any:
    r = await http.post(
        base + "/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": v,
        },
    )
    assert r.status_code == 200, r.text
    return r.json()


async def test_sign_ins_survive_a_restart(nursery: trio.Nursery, tmp_path: Path) -> None:
    port, door_port = free_port(), free_port()
    settings = {
        "bind": f"127.0.0.1:{port}",
        "public_url": f"http://127.0.0.1:{port}",
        "door_bind": f"127.0.0.1:{door_port}",  # the home dials the same door after the restart
    }
    base = settings["public_url"]
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
        async with trio.open_nursery() as first_run:
            first = await start_env(first_run, tmp_path / "bridge", **settings)
            home = await Env(first.bridge, nursery).add_home("h1", "--approve-all")
            client_id = (
                await http.post(base + "/oauth/register", json={"redirect_uris": [REDIRECT]})
            ).json()["client_id"]
            # approved at home before the restart; its code never reached the client
            approved = await consent_page(http, base, client_id)
            code = (await home.console(op="claim"))["code"]
            r = await http.post(base + "/authorize", data=approved | {"code": code})
            assert r.status_code == 303
            await until(lambda: first.bridge.oauth._pending[approved["req"]].status == "approved")
            # a consent page open, and a claim code the home shows, not yet typed
            waiting = await consent_page(http, base, client_id)
            shown = (await home.console(op="claim"))["code"]
            await until(lambda: len(first.bridge.door.claims) == 1)  # its offer arrived
            await first.bridge.drain()
        second = await start_env(nursery, tmp_path / "bridge", **settings)
        assert approved["req"] in second.bridge.oauth._pending  # restored from the store
        await until(lambda: second.bridge.door.online("h1"))  # the home reconnected
        # the approved sign-in gets a fresh code, which the client exchanges
        code = await code_after_waiting(http, base, approved["req"])
        tokens = await exchange(http, base, client_id, code, approved["v"])
        assert tokens["token_type"] == "Bearer"
        # the page opened before the restart takes the code the home showed before it
        r = await http.post(base + "/authorize", data=waiting | {"code": shown})
        assert r.status_code == 303, r.text
        code = await code_after_waiting(http, base, waiting["req"])
        tokens = await exchange(http, base, client_id, code, waiting["v"])
        assert tokens["refresh_token"]


async def test_expired_state_is_deleted_on_load(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.put_oauth_state("consent", "old", {"a": 1}, 1_000)
    await store.put_oauth_state("consent", "live", {"a": 2}, 3_000)
    await store.put_oauth_state("code", "old", {"a": 3}, 1_000)
    assert await store.oauth_states("consent", 2_000) == [("live", {"a": 2}, 3_000)]
    assert await store.oauth_states("consent", 0) == [("live", {"a": 2}, 3_000)]  # gone for good
    assert await store.oauth_states("code", 0) == [("old", {"a": 3}, 1_000)]  # another kind stays
    await store.drop_oauth_state("consent", "live")
    assert await store.oauth_states("consent", 0) == []
    store.close()
