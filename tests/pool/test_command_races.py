"""Commands as a careless or hostile client sends them, through the real pool and the stub
box on MockClock: the same call retried while the first try is still at the box, commands
racing a revocation, and what the pool's gauges show afterwards (nothing held, nothing queued).
"""

from __future__ import annotations

import trio
import trio.testing

from ftwbridge.proto.control import CmdState
from ftwbridge.proto.refusal import Refusal
from stubbox.uplink import StubHome
from tests.harness import Rig
from tests.pool.test_command import HOLD, control_agent


async def test_a_retry_racing_a_conflict_acts_once(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    """The first try meets `E_CONFLICT` and goes again under a new `cmdId`; a retry of the same
    call waiting for the session must not then send the first `cmdId` afresh (the box has not
    kept a retryable refusal, so it would act a second time)."""
    key = await control_agent(rig, stub)
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    acted = stub.box.commands.stats.acted
    stub.box.home.controls.bump()  # the owner changed something at home since
    first = rig.pool.new_cmd_id()
    outcomes: list[str] = []

    async def send() -> None:
        out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, first)
        outcomes.append(out.cmd_id)

    with trio.fail_after(60):
        async with trio.open_nursery() as n:
            n.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(send)  # the client's retry, while the first is at the box
    assert len(outcomes) == 2 and outcomes[0] == outcomes[1] != first
    assert stub.box.commands.stats.acted == acted + 1  # one hold, once
    stats = rig.pool.statistics()
    assert stats.calls_in_flight == 0 and stats.queued == 0 and stats.busy == 0
