"""Commands as a careless or hostile client sends them, through the real pool and the stub
box on MockClock: the same call retried while the first try is still at the box, commands
racing a revocation, and what the pool's gauges show afterwards (nothing held, nothing queued).
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from ftwbridge.proto.control import CmdResult, CmdState
from ftwbridge.proto.door import tun
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.names import Code
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import Msg
from stubbox.uplink import StubHome
from tests.harness import Rig
from tests.pool.test_command import HOLD, control_agent


def held(rig: Rig) -> tuple[int, int]:
    """(open sessions, everything a call could leave held: calls-in-flight slots, queue
    places, sessions BUSY); the pool's gauges."""
    s = rig.pool.statistics()
    return s.sessions, s.calls_in_flight + s.queued + s.busy


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
    assert held(rig) == (1, 0)


def _box_drops_results(stub: StubHome) -> None:
    """The box acts and acks, then never sends `cmd.result` (a driver that hangs)."""
    real = stub.box.receive

    def receive(sid: int, message: bytes, now_ms: int, uptime_ms: int) -> list[bytes]:
        acted = stub.box.commands.stats.acted
        out = real(sid, message, now_ms, uptime_ms)
        return out[:1] if stub.box.commands.stats.acted > acted else out

    stub.box.receive = receive  # type: ignore[method-assign]


async def test_an_ack_without_a_result_ends_unconfirmed_by_the_deadline_and_leaks_nothing(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    """Upstream: `cmd.ack` and no `cmd.result` is `unconfirmed` (the box accepted it, the
    charger has not confirmed), never a plain timeout that would tell the assistant nothing
    happened while the car charges. The session the box left hanging is closed within the
    call deadline (the box hears `tun.end`), its slot freed."""
    key = await control_agent(rig, stub)
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    _box_drops_results(stub)
    deadline = rig.config.call_deadline_s
    t0 = trio.current_time()
    with trio.move_on_after(deadline):
        out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    assert trio.current_time() - t0 < deadline
    assert out.ack is not None and out.result.state is CmdState.UNCONFIRMED
    await trio.sleep(deadline + 1)
    assert held(rig) == (0, 0) and rig.pool.statistics().drops.get("no_answer") == 1


async def test_no_ack_and_no_result_is_a_timeout_in_time(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub)
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    stub.hold = True  # the box goes silent
    deadline = rig.config.call_deadline_s
    refused: list[Refusal] = []
    with trio.move_on_after(deadline):
        try:
            await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
        except Refusal as exc:
            refused.append(exc)
    assert refused == [Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})]
    await trio.sleep(deadline + 1)
    assert held(rig) == (0, 0)


async def test_a_command_at_the_box_when_its_agent_is_revoked_ends_revoked_at_once(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub)
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    stub.hold = True  # the command reaches a box that has not answered yet
    refused: list[Refusal] = []

    async def send() -> None:
        try:
            await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
        except Refusal as exc:
            refused.append(exc)

    t0 = trio.current_time()
    with trio.fail_after(60):
        async with trio.open_nursery() as n:
            n.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            assert rig.pool.statistics().calls_in_flight == 1
            await stub.drop_agent(key)
    assert refused == [Refusal(Code.E_GRANT_REVOKED)] and trio.current_time() - t0 < 1
    assert held(rig) == (0, 0) and rig.pool.statistics().drops.get("revoked") == 1


async def test_cmds_per_hour_of_zero_is_refused_at_the_bridge_before_a_byte_leaves(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub, cmds_per_hour=0)
    await rig.pool.call("h1", key, "loadpoints.get")  # the session is open and warm
    sent = len(rig.links[0].sent)
    refused: list[Refusal] = []
    try:
        await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    except Refusal as exc:
        refused.append(exc)
    assert refused == [Refusal(Code.E_CAP_EXCEEDED, {"cap": "cmds_per_hour", "max": 0, "asked": 1})]
    assert len(rig.links[0].sent) == sent


async def test_an_acked_command_whose_result_is_another_commands_ends_unconfirmed(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    """A box that acks our `cmdId`, then sends a `cmd.result` for another one (or one the
    bridge cannot read): the box did act, so the assistant hears `unconfirmed` (check the
    charger), not an error that says nothing happened. A second `cmd.ack` changes nothing."""
    key = await control_agent(rig, stub)
    real = stub.box.commands.handle
    other = rig.pool.new_cmd_id()

    def handle(*args: Any, **kwargs: Any) -> list[tuple[str, Any]]:
        out = real(*args, **kwargs)
        if len(out) != 2:
            return out
        (ack_t, ack), (result_t, result) = out
        return [(ack_t, ack), (ack_t, ack), (result_t, result | {"cmdId": other})]

    stub.box.commands.handle = handle  # type: ignore[method-assign]
    cmd_id = rig.pool.new_cmd_id()
    out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, cmd_id)
    assert out.cmd_id == cmd_id and out.ack is not None
    assert out.result == CmdResult(cmd_id, CmdState.UNCONFIRMED)
    assert held(rig) == (1, 0)


async def test_an_agent_decided_flood_answers_no_call_and_leaks_nothing(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    """A box that pushes `agent.decided` (good and malformed) hundreds of times: the pushes
    answer no call, the door's limits drop what is past them (answers too, while the flood
    lasts: the box only hurts its own calls, which end by their deadline), and once the
    limits refill the next read and command go through on the same session."""
    key = await control_agent(rig, stub)
    await rig.pool.call("h1", key, "loadpoints.get")
    [(sid, sess)] = stub.box._sessions.items()
    bodies: list[Any] = [{"reqId": "goal-1", "decision": "approved", "atMs": 1}, {"reqId": 5}, None]
    with trio.fail_after(60):
        for n in range(300):
            push = sess.channel.wrap(Envelope(Msg.AGENT_DECIDED, None, bodies[n % 3]))
            await stub.send(tun(sid, push))
        await trio.sleep(10)  # the door's per-home limits refill (a flood drops what is past)
        await rig.pool.call("h1", key, "live.get")
        out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    assert out.result.state in (CmdState.APPLIED, CmdState.UNCONFIRMED)
    assert held(rig) == (1, 0) and rig.pool.statistics().drops == {}
