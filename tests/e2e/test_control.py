"""Control end to end (docs/control.md): the bridge on a real port, a stub home in its own
process, the official `mcp` client in both eras and the TypeScript client.

The stub's charger follows the time of day (the owner's night charge holds it 01:00-05:00; the
family car is away 08:00-17:30), so each test puts the home's clock at 19:00 with the owner
console's `clock {offsetMs}` and lets the bridge accept that skew: the test means the same at
any hour it runs. Each test starts one bridge and one home and runs its whole story on them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from devtools.signin import oauth_sign_in

from .env import REAL_WAIT_S, Env, Home, now_ms

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SCOPES = [
    "ftw.live.read",
    "ftw.assets.read",
    "ftw.health.read",
    "ftw.dispatch.write",
    "ftw.goals.write",
]
OPS = ["loadpoint.hold"]
MODERN = {
    "content-type": "application/json",
    "accept": "application/json",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
PEERS = Path(__file__).parents[2] / "peers"
SKEWED = pytest.mark.config(clock_skew_max_ms=DAY_MS)
SKEWED_UNASKED = pytest.mark.config(clock_skew_max_ms=DAY_MS, confirm_commands="off")
"""The refusals and the retry rule, with the person's confirmation off (tested above)."""


async def home_at(env: Env, hour: float) -> Home:
    """Home "h1", its clock moved to `hour` (UTC) of some day within the next 24 h
    (`home.offset_ms`)."""
    home = await env.add_home("h1")
    home.offset_ms = int(hour * HOUR_MS - now_ms() % DAY_MS) % DAY_MS
    await home.console(op="clock", offsetMs=home.offset_ms)
    return home


async def post(env: Env, token: str, name: str, arguments: dict[str, Any], rid: int = 1) -> Any:
    body = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": META},
    }
    async with env.http(token) as http:
        r = await http.post(env.url, content=json.dumps(body), headers=MODERN | {"mcp-name": name})
    return r


def words(result: Any) -> str:
    return str(result.content[0].text)


async def charge(c: Client, arguments: dict[str, Any], previewed: list[str]) -> Any:
    """`ev_charge_now`; when the bridge answers a preview (a client that cannot elicit), the
    person reads its question (kept in `previewed`) and says yes: the call goes again with
    its confirmation."""
    result = await c.call_tool("ev_charge_now", arguments)
    shown = result.structured_content
    if shown is not None and shown.get("state") == "awaiting_confirmation":
        previewed.append(shown["question"])
        result = await c.call_tool(
            "ev_charge_now", arguments | {"confirmation": shown["confirmation"]}
        )
    return result


async def story(
    c: Client, home: Home, *, power_w: int, soc_permille: int, previewed: list[str] | None = None
) -> Any:
    """Control's whole story with client `c`: a charge, the hold and the power the charger
    draws, a stop, a charge target by a time that the owner approves at home. Returns the
    charge's structured result."""
    arguments = {"charger": "lp1", "power_w": power_w, "minutes": 10}
    started = await charge(c, arguments, [] if previewed is None else previewed)
    assert not started.is_error, words(started)
    run = started.structured_content
    assert run is not None and run["state"] == "applied"
    lp = (await c.call_tool("chargers_list", {})).structured_content["loadpoints"][0]  # type: ignore[index]
    assert lp["hold"] is not None and lp["hold"]["untilMs"] == run["holdEndsAtMs"]
    # what the charger draws (whole amps on three phases), not what was asked
    assert lp["power_w"] == run["observed"]["power_w"] != power_w
    stopped = await c.call_tool("ev_stop", {"charger": "lp1"})
    assert not stopped.is_error and stopped.structured_content["state"] == "applied"  # type: ignore[index]
    lp = (await c.call_tool("chargers_list", {})).structured_content["loadpoints"][0]  # type: ignore[index]
    assert lp["hold"] is None
    by_ms = now_ms() + 3 * DAY_MS
    queued = await c.call_tool(
        "goal_request",
        {"goal": "ev_target", "car": "car1", "soc_permille": soc_permille, "by_ms": by_ms},
    )
    assert not queued.is_error, words(queued)
    req = queued.structured_content["reqId"]  # type: ignore[index]
    waiting = await home.console(op="requests")
    assert [w["reqId"] for w in waiting if w.get("kind") == "goal"] == [req]
    await home.console(op="decide", reqId=req, decision="approve")
    listed = (await c.call_tool("requests_list", {})).structured_content["requests"]  # type: ignore[index]
    assert (req, "approved") in [(r["reqId"], r["state"]) for r in listed]
    cars = (await c.call_tool("cars_list", {})).structured_content["cars"]  # type: ignore[index]
    assert cars[0]["id"] == "car1" and cars[0]["target_soc_permille"] == soc_permille
    return run


@SKEWED
async def test_an_assistant_charges_stops_and_asks_the_owner(env: Env, tmp_path: Path) -> None:
    home = await home_at(env, 19)
    _key, _agent, token = await env.agent(home, scopes=SCOPES, ops=OPS, ttl_ms=2 * DAY_MS)
    asked: list[str] = []

    async def accept(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    with trio.fail_after(REAL_WAIT_S):
        async with (
            env.http(token) as http,
            Client(
                streamable_http_client(env.url, http_client=http),
                mode="2026-07-28",
                elicitation_callback=accept,
            ) as c,
        ):
            run = await story(c, home, power_w=7400, soc_permille=900)
        assert run["observed"]["power_w"] == 6900
        assert asked == [
            "Charge Garage charger at 7.4 kW for 10 minutes? It stops by itself after that."
        ]
        previewed: list[str] = []  # a 2025-era client cannot elicit: a preview, then a yes
        async with env.http(token) as http, env.client(http, "legacy") as c:
            await story(c, home, power_w=11000, soc_permille=800, previewed=previewed)
        assert previewed == [
            "Charge Garage charger at 11 kW for 10 minutes? It stops by itself after that."
        ]

        node = PEERS / "node_modules" / ".bin" / "node"
        if not node.exists():
            pytest.fail("peers are not installed: run `make peers` (make test does it)")
        nenv = dict(os.environ) | {"HOME": str(tmp_path), "NO_COLOR": "1"}
        done = await trio.run_process(
            [str(node), "ts_control.mjs", "pin", env.url, token],
            cwd=PEERS,
            env=nenv,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert seen["charge"]["state"] == "applied" and seen["charge"]["observed"]["power_w"] > 0
    assert seen["question"].startswith("Charge Garage charger at 7.4 kW for 5 minutes?")
    assert seen["hold"] is not None and seen["stop"]["state"] == "applied"
    assert seen["again"]["isError"] and seen["again"]["text"].startswith("E_NOT_FOUND: ")


@SKEWED_UNASKED
async def test_refusals_reach_the_assistant_in_words_and_a_retry_acts_once(env: Env) -> None:
    home = await home_at(env, 19)
    _k, _a, reader = await env.agent(home, scopes=SCOPES[:3], ttl_ms=2 * DAY_MS)
    _k, _a, no_ops = await env.agent(home, scopes=SCOPES, ttl_ms=2 * DAY_MS)
    key, _a, token = await env.agent(
        home, scopes=SCOPES, ops=OPS, ttl_ms=2 * DAY_MS, caps={"hold_s": 600, "cmds_per_hour": 3}
    )
    charge = {"charger": "lp1", "power_w": 7400, "minutes": 5}
    with trio.fail_after(REAL_WAIT_S):
        r = await post(env, reader, "ev_charge_now", charge)  # step-up
        assert (
            r.status_code == 403 and 'scope="ftw.dispatch.write"' in r.headers["www-authenticate"]
        )
        r = await post(env, no_ops, "ev_charge_now", charge)
        assert "not allowed to do loadpoint.hold" in r.json()["result"]["content"][0]["text"]
        r = await post(env, token, "ev_charge_now", charge | {"minutes": 20})
        assert "at most 600 s" in r.json()["result"]["content"][0]["text"]

        # a retried call (same id, same arguments) acts once: the home's clock moves a minute
        # on before the retry, and the hold still ends when the first try said (acting again
        # would have set it a minute later)
        first = (await post(env, token, "ev_charge_now", charge, rid=41)).json()["result"]
        await home.console(op="clock", offsetMs=home.offset_ms + 60_000)
        again = (await post(env, token, "ev_charge_now", charge, rid=41)).json()["result"]
        assert again["structuredContent"]["cmdId"] == first["structuredContent"]["cmdId"]
        assert again["structuredContent"]["repeated"] is True  # the first try's answer, said so
        assert (
            again["structuredContent"]["observedAtMs"] == first["structuredContent"]["observedAtMs"]
        )
        r = await post(env, token, "chargers_list", {})
        hold = r.json()["result"]["structuredContent"]["loadpoints"][0]["hold"]
        assert hold["untilMs"] == first["structuredContent"]["holdEndsAtMs"]
        await post(env, token, "ev_stop", {"charger": "lp1"}, rid=42)
        r = await post(env, token, "ev_stop", {"charger": "lp1"})
        text = r.json()["result"]["content"][0]["text"]
        assert text.startswith("E_NOT_FOUND: ") and "no hold by this assistant" in text

        await home.console(op="block", by=["grid_outage"])
        r = await post(env, token, "ev_charge_now", charge, rid=43)
        assert r.json()["result"]["content"][0]["text"].startswith("E_PRECONDITION: ")
        await home.console(op="block", by=[])
        r = await post(
            env, token, "ev_charge_now", {"charger": "lp7", "power_w": 7400, "minutes": 5}, rid=44
        )
        assert "no charger called 'lp7'" in r.json()["result"]["content"][0]["text"]

        for rid in (45, 46):  # the 2nd and 3rd the box carried out this hour, then the cap
            r = await post(env, token, "ev_charge_now", charge, rid=rid)
            assert not r.json()["result"]["isError"], r.text
        r = await post(env, token, "ev_charge_now", charge, rid=47)
        err = r.json()["result"]["_meta"]["ftwbridge/error"]
        assert err["code"] == "E_RATE_LIMITED" and err["retryAfterMs"] > 3_000_000
        r = await post(env, token, "ev_stop", {"charger": "lp1"}, rid=48)  # stopping always works
        assert not r.json()["result"]["isError"], r.text

        await home.console(op="clock", offsetMs=(2 * HOUR_MS - now_ms() % DAY_MS) % DAY_MS)
        _k2, _a2, night = await env.agent(home, scopes=SCOPES, ops=OPS, ttl_ms=2 * DAY_MS)
        r = await post(env, night, "ev_charge_now", charge)  # the owner's night charge holds it
        assert "Someone else holds that charger" in r.json()["result"]["content"][0]["text"]

        await home.console(op="drop_agent", key=key.hex())  # revoked at home
        with trio.fail_after(REAL_WAIT_S):
            await env.bridge.door.wait_roster("h1", lambda ro: key not in ro.agents())
        r = await post(env, token, "ev_stop", {"charger": "lp1"})
        assert r.status_code == 401 and "withdrawn" in r.json()["error_description"]


async def test_consent_lists_control_apart_and_the_owner_may_approve_reads_only(env: Env) -> None:
    """Consent for control (docs/control.md, "Consent"), through the official client's OAuth provider: the consent page lists
    what the assistant could change apart from what it could read, `agent.request` carries the
    ops asked, and an owner who approves reads only leaves a row with no ops and a token that
    the control tools answer with a step-up challenge."""
    home = await env.add_home("h1")
    asked: list[dict[str, Any]] = []

    async def owner() -> None:
        # the request crosses into the stub's process, which has no event to wait on: look at
        # its console until it is there (the test's fail_after bounds it)
        while True:
            waiting = [w for w in await home.console(op="requests") if w["kind"] == "assistant"]
            if waiting:
                break
            await trio.sleep(0.05)
        asked.append(waiting[0])
        await home.console(op="approve", req=waiting[0]["req"], readsOnly=True)

    base = env.bridge.site.public_url.rstrip("/")
    auth = await oauth_sign_in(base, env.url, home.console_port, "h1")
    with trio.fail_after(REAL_WAIT_S):
        async with trio.open_nursery() as n:
            n.start_soon(owner)
            async with (
                httpx2.AsyncClient(auth=auth, timeout=30) as http,
                env.client(http, "2026-07-28") as c,
            ):
                await c.list_tools()
    (consent,) = auth.demo_consents
    reads, _, changes = consent.page.partition("and to change, within the limits you set at home")
    assert "Current readings" in reads and "charging" not in reads
    assert "Start and stop charging for up to 15 minutes at a time" in changes
    assert "Ask you for lasting changes" in changes and "approve reading only" in changes
    assert asked[0]["ops"] == ["loadpoint.hold"]
    assert {"ftw.dispatch.write", "ftw.goals.write"} <= set(asked[0]["scopes"])
    roster = await env.bridge.door.roster("h1")
    assert roster is not None
    (grant,) = roster.agents().values()
    assert grant.ops == () and "ftw.dispatch.write" not in grant.scopes
    token = auth.demo_storage.tokens.access_token
    r = await post(env, token, "ev_charge_now", {"charger": "lp1", "power_w": 7400})
    assert r.status_code == 403 and 'scope="ftw.dispatch.write"' in r.headers["www-authenticate"]
