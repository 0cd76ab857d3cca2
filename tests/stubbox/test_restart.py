"""A stub home process killed and started again with the same `--state` keeps its owner's
roster, so the bridge goes on serving the agents granted before.

Real processes and sockets: the bridge in this process on 127.0.0.1 port 0, the stub home
in its own (tests/e2e/env.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from stubbox.state import state_path
from tests.e2e.env import REAL_WAIT_S, Env, Home


async def read_status(env: Env, token: str) -> Any:
    """One `status` tool call through the official `mcp` client; returns its result."""
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            return await client.call_tool("status", {})


async def settled(home: Home) -> dict[str, Any]:
    """The stub's console `status` once the bridge has answered its uplink's roster."""
    with trio.fail_after(REAL_WAIT_S):
        while True:  # the answer crosses processes: no event reaches this one, so ask again
            status: dict[str, Any] = await home.console(op="status")
            if status["connected"] and status["lastRosterReply"]:
                return status
            await trio.sleep(0.1)


async def test_a_killed_stub_restarted_with_its_state_keeps_the_agents(
    env: Env, tmp_path: Path
) -> None:
    state = tmp_path / "stub"
    home = await env.add_home("r1", "--state", str(state))
    _key, _agent, token = await env.agent(home)
    assert not (await read_status(env, token)).is_error
    kept = json.loads(state_path(state, "r1").read_text())
    assert kept["seq"] == 2

    home.proc.kill()  # SIGKILL: nothing is written on the way out
    with trio.fail_after(REAL_WAIT_S):
        await home.proc.wait()
    again = await env.add_home("r1", "--state", str(state))
    status = await settled(again)
    assert status["seq"] == 2  # the kept roster, not a fresh seq 1
    assert status["lastRosterReply"] == {"t": "roster.ok", "seq": 2}
    bridge_roster = await env.bridge.door.roster("r1")
    assert bridge_roster is not None and bridge_roster.signed.hex() == kept["roster"]
    result = await read_status(env, token)  # the box admits the agent granted before
    assert not result.is_error, result.content

    _key2, _agent2, token2 = await env.agent(again)  # the owner goes on at the next seq
    assert (await env.bridge.door.roster("r1")).seq == 3  # type: ignore[union-attr]
    assert not (await read_status(env, token2)).is_error
