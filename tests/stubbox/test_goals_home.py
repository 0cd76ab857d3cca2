"""The owner's side of part E at a stub home: the console's `requests`, `decide` and `block`,
`--approve-all` deciding goal requests, approval for reads only, and goal requests and the
owner's changes surviving a restart with `--state` (no sockets: the stub's own methods)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from ftwbridge.proto.noise import generate_static
from ftwbridge.proto.roster import AgentGrant
from stubbox.consent import grant_for
from stubbox.console import _command
from stubbox.state import state_path
from stubbox.uplink import StubHome

NOW = 1_790_000_000_000
WAIT_S = 30.0
"""Bound on a real-time wait here (a thread's write of the state file on a busy machine)."""
GRANT = AgentGrant(
    "a1", "c", "Assistant", ("ftw.goals.write",), (), {"pending_requests": 3}, NOW, NOW + 10**9
)
SITE = {"goal": "site_mode", "args": {"mode": "self_consumption"}, "note": "sunny week"}
TARGET = {"goal": "ev_target", "args": {"car": "car1", "soc_permille": 900, "byMs": NOW + 10**7}}


def stub_at(now: list[int]) -> StubHome:
    return StubHome("h1", seed="h1", clock=lambda: now[0])


def ask(stub: StubHome, body: dict[str, Any], key: bytes = b"\x07" * 32) -> str:
    return stub.box.goals.ask(key, GRANT, body, stub.wall_ms()).req_id


async def console(stub: StubHome, **cmd: Any) -> Any:
    return await _command({"h1": stub}, cmd)


async def test_the_console_lists_and_decides_goal_requests() -> None:
    stub = stub_at([NOW])
    site, target = ask(stub, SITE), ask(stub, TARGET)
    waiting = await console(stub, op="requests")
    assert [(w["kind"], w["reqId"], w["state"]) for w in waiting] == [
        ("goal", site, "pending"),
        ("goal", target, "pending"),
    ]
    assert waiting[0]["agent"] == "a1" and waiting[0]["note"] == "sunny week"
    entry = await console(stub, op="decide", reqId=target, decision="approve")
    assert entry["state"] == "approved" and entry["decidedAtMs"] == NOW
    assert stub.box.home.cars(NOW)["cars"][0]["target_soc_permille"] == 900
    await console(stub, op="decide", reqId=site, decision="deny")
    assert stub.box.home.live(NOW, 0)["mode"] == "planner_arbitrage"
    assert await console(stub, op="requests") == []
    assert len(await console(stub, op="requests", all=True)) == 2
    for bad, message in [
        ({"reqId": site, "decision": "approve"}, "denied already"),
        ({"reqId": "goal-99", "decision": "deny"}, "no goal request"),
        ({"reqId": site, "decision": "yes"}, "approve"),
    ]:
        with pytest.raises((KeyError, ValueError), match=message):
            await console(stub, op="decide", **bad)


async def test_block_gates_dispatch_and_shows_in_live() -> None:
    stub = stub_at([NOW])
    assert await console(stub, op="block", by=["meter.p1 stale"]) == {
        "dispatchBlockedBy": ["meter.p1 stale"]
    }
    assert stub.box.home.live(NOW, 0)["dispatchBlockedBy"] == ["meter.p1 stale"]
    with pytest.raises(ValueError, match="list of reasons"):
        await console(stub, op="block", by="everything")


async def test_approve_all_decides_goal_requests_too() -> None:
    stub = stub_at([NOW])
    stub.approve_all = True
    req = ask(stub, SITE)
    await stub._goals_moved(stub.box.goals.version)
    assert stub.box.goals.waiting(NOW) == []
    assert stub.box.home.live(NOW, 0)["mode"] == "self_consumption"
    [entry] = await console(stub, op="requests", all=True)
    assert entry["reqId"] == req and entry["state"] == "approved"


def test_consent_grants_the_ops_asked_or_reads_only() -> None:
    _private, key = generate_static()
    request = {
        "req": "r1234567890",
        "client": "c",
        "name": "A",
        "scopes": ["ftw.live.read", "ftw.dispatch.write", "ftw.goals.write"],
        "ops": ["loadpoint.hold", "site.mode.set", "battery.hold", 7],
        "caps": {"hold_s": 99_999, "cmds_per_hour": 10, "made_up": 3, "sessions": True},
        "key": key,
    }
    full = grant_for(request, now_ms=NOW)
    assert full.ops == ("loadpoint.hold",)  # site.mode.set is the owner's, battery.hold not ours
    assert full.scopes == ("ftw.live.read", "ftw.dispatch.write", "ftw.goals.write")
    assert full.caps == {"hold_s": 14_400, "cmds_per_hour": 10}
    reads = grant_for(request, now_ms=NOW, reads_only=True)
    assert reads.ops == () and reads.scopes == ("ftw.live.read",)
    narrowed = grant_for(request, now_ms=NOW, scopes=["ftw.live.read", "ftw.goals.write"])
    assert narrowed.ops == ()  # no ftw.dispatch.write: the hold's scope is not granted


async def test_approve_reads_only_at_the_console() -> None:
    stub = stub_at([NOW])
    _private, key = generate_static()
    stub.requests["r1"] = {
        "req": "r1",
        "scopes": ["ftw.live.read", "ftw.dispatch.write"],
        "ops": ["loadpoint.hold"],
        "key": key,
    }
    await console(stub, op="approve", req="r1", readsOnly=True)
    grant = stub.owner.roster.agents()[key]
    assert grant.ops == () and grant.scopes == ("ftw.live.read",)


async def test_goal_requests_and_the_owners_changes_outlive_a_restart(tmp_path: Path) -> None:
    path = state_path(tmp_path, "h1")
    now = [NOW]
    stub = stub_at(now)
    with trio.fail_after(WAIT_S):
        await stub.keep_state(path)
        target, site = ask(stub, TARGET), ask(stub, SITE)
        await stub._keep_goals(-1)  # what the uplink does once the agent's message is handled
        await stub.decide(target, True)
        again = stub_at(now)  # a restart
        await again.keep_state(path)
    assert [e.record for e in again.box.goals.entries()] == [
        e.record for e in stub.box.goals.entries()
    ]
    assert again.box.home.cars(NOW)["cars"][0]["target_soc_permille"] == 900
    [waiting] = again.box.goals.waiting(NOW)
    assert waiting.record.req_id == site
    with trio.fail_after(WAIT_S):
        await again.decide(site, True)  # the owner answers after the restart
    assert again.box.home.live(NOW, 0)["mode"] == "self_consumption"
    assert ask(again, SITE) == "goal-3"  # ids go on from the kept ones
    kept = json.loads(path.read_text())
    assert kept["controls"] == {"mode": "self_consumption", "targets": {"car1": 900}}


def test_a_damaged_goal_row_is_refused_in_one_sentence(tmp_path: Path) -> None:
    from stubbox.state import StateError, decode_state

    stub = stub_at([NOW])
    ask(stub, SITE)
    doc = json.loads(stub._state_bytes())
    doc["goals"][0]["state"] = "lost"
    with pytest.raises(StateError, match=r"not usable .*state"):
        decode_state(
            json.dumps(doc).encode(),
            path=tmp_path / "h1.json",
            home="h1",
            home_key=stub.owner.home_public_key,
        )


@pytest.mark.parametrize(
    "choice",
    [
        {"readsOnly": "true"},
        {"readsOnly": 1},
        {"readsOnly": None},
        {"scopes": "ftw.live.read"},
        {"scopes": ["ftw.live.read", 7]},
        {"expiresAtMs": "soon"},
        {"expiresAtMs": True},
    ],
)
async def test_the_owners_approval_parses_closed(choice: dict[str, Any]) -> None:
    """A choice of the wrong type is refused, never read as a wider grant: `"readsOnly":
    "true"` granted the ops before."""
    stub = stub_at([NOW])
    _private, key = generate_static()
    stub.requests["r1"] = {
        "req": "r1",
        "scopes": ["ftw.live.read", "ftw.dispatch.write"],
        "ops": ["loadpoint.hold"],
        "key": key,
    }
    with pytest.raises(ValueError):
        await console(stub, op="approve", req="r1", **choice)
    assert key not in stub.owner.roster.agents() and "r1" in stub.requests
