"""The soak's fleet, without processes: what the load reads while an agent is replaced.

The load picks its next agent from the home's turn at any moment, the roster wait of a grant
included. A new agent put in the turn before its token was minted was sent with an empty
`Bearer `, which h11 refuses before a byte leaves the client: the short soak's `revoke`
counted that call `broken`, a fault of the soak's own, on a loaded machine (where the roster
wait is long) about one run in ten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soak.fleet import Fleet
from soak.procs import BridgeProc, Children


class _Console:
    """A stub's console that only records what the owner did."""

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    async def console_do(self, home: str, op: dict[str, Any]) -> dict[str, Any]:
        self.ops.append(op)
        return {}


async def test_a_new_agent_joins_the_turn_with_its_token_once_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children = Children()
    bridge = BridgeProc(tmp_path, {}, children)
    bridge.state_dir.mkdir()
    fleet = Fleet(bridge, children, tmp_path, solo=1, fleet=0, agents_per_home=2)
    await fleet.enroll()
    home = fleet.homes[0]
    for a in fleet.agents[home]:
        a.token = await fleet.issue(a)
    revoked, kept = fleet.agents[home]
    revoked.revoked_at = 0.0  # as `Fleet.revoke` leaves it, the bridge holding the roster
    console = _Console()
    monkeypatch.setattr(fleet, "stub_of", lambda home: console)
    turns: list[tuple[str, str]] = []  # (agent, token) as the load read them

    async def held_agents(h: str) -> set[bytes]:
        for _ in range(4):  # the load, while the bridge waits
            agent = fleet.next_agent(h)
            turns.append((agent.id, agent.token))
        if len(turns) < 8:
            return set()  # the new roster not yet held
        return {bytes.fromhex(row["key"]) for row in console.ops[-1]["agents"]}

    monkeypatch.setattr(fleet, "held_agents", held_agents)
    try:
        new = await fleet.replace(revoked)
    finally:
        fleet.close()
    assert all(token for _, token in turns), turns
    assert new.token and fleet.agents[home] == [new, kept]
    granted = {row["key"] for row in console.ops[-1]["agents"]}
    assert granted == {kept.key.hex(), new.key.hex()}
