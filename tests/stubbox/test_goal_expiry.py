"""A goal request nobody decides expires after 24 h, and its agent hears `agent.decided
{expired}` then, on its open session, though nothing else happens at the home (PROTOCOL.md
part E): the stub box's own timer, on MockClock, through its uplink shell (`run_session`)."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from ftwbridge.proto.control import Decided, Decision, GoalQueued
from ftwbridge.proto.door import tun, tun_fields
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.names import GoalMsg
from ftwbridge.proto.noise import Initiator, generate_static
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import AgentSession, Push
from stubbox.uplink import StubHome
from tests.stubbox.test_control_pair import CONTROL, DAY, EVENING


class Socket:
    """The stub's end of an in-memory uplink (what trio-websocket's connection offers)."""

    def __init__(self) -> None:
        self.to_stub, self._inbox = trio.open_memory_channel[bytes](64)
        self._outbox, self.from_stub = trio.open_memory_channel[bytes](64)

    async def get_message(self) -> bytes:
        return await self._inbox.receive()

    async def send_message(self, data: bytes) -> None:
        await self._outbox.send(data)

    async def aclose(self, code: int = 1000) -> None:
        self.to_stub.close()

    async def next_tun(self) -> bytes:
        while True:
            env = decode_envelope(await self.from_stub.receive())
            if env.t == Msg.TUN:
                return tun_fields(env.b)[1]

    async def call(self, session: AgentSession, message: bytes) -> list[Any]:
        await self.to_stub.send(tun(1, message))
        events: list[Any] = []
        while not events or session.busy:
            events += session.receive(await self.next_tun())
        return events


GOAL = {"goal": "site_mode", "args": {"mode": "idle"}}


async def connected(nursery: trio.Nursery) -> tuple[StubHome, Socket, AgentSession]:
    """A stub home on MockClock's time, its uplink served, and an agent's session that has
    said hello."""
    stub = StubHome("h1", seed="h1", clock=lambda: EVENING + int(trio.current_time() * 1000))
    private, key = generate_static()
    grant = AgentGrant("a1", "c", "A", CONTROL, ("loadpoint.hold",), {}, EVENING, EVENING + 9 * DAY)
    await stub.put_agent(key, grant)
    ws = Socket()
    nursery.start_soon(stub.run_session, ws)
    await ws.to_stub.send(Envelope(Msg.DOOR_CHALLENGE, None, {"nonce": bytes(16)}).encode())
    await stub.connected.wait()
    ini = Initiator(our_static=private, their_static=stub.owner.noise_public)
    await ws.to_stub.send(tun(1, ini.write_message1()))
    keys, _ = ini.read_message2(await ws.next_tun())
    s = AgentSession(keys)
    await ws.call(s, s.notify(Msg.HELLO, {}))
    return stub, ws, s


async def test_an_undecided_request_is_pushed_expired_when_its_day_runs_out(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    stub, ws, s = await connected(nursery)
    goal = GOAL
    asked_at = trio.current_time()
    [queued] = await ws.call(s, s.request(GoalMsg.GOAL_REQUEST.value, goal)[1])
    assert isinstance(queued.body, GoalQueued)
    with trio.fail_after(DAY / 1000 + 60):  # nobody decides and nothing else is sent
        [pushed] = s.receive(await ws.next_tun())
    assert pushed == Push(
        Msg.AGENT_DECIDED, Decided(queued.body.req_id, Decision.EXPIRED, queued.body.expires_at_ms)
    )
    assert abs(trio.current_time() - asked_at - DAY / 1000) < 0.01  # at its expiry, not later
    [queued] = await ws.call(s, s.request(GoalMsg.GOAL_REQUEST.value, goal)[1])
    await stub.decide(queued.body.req_id, False)
    [denied] = s.receive(await ws.next_tun())
    assert isinstance(denied, Push) and denied.body.decision is Decision.DENIED
    with trio.move_on_after(2 * DAY / 1000) as quiet:  # a decided request never expires
        await ws.next_tun()
    assert quiet.cancelled_caught
    await ws.aclose()


async def test_a_clock_moved_past_a_requests_expiry_pushes_it_at_once(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The owner's console moves the box's clock (`clock {offsetMs}`): the timer looks again."""
    stub, ws, s = await connected(nursery)
    [queued] = await ws.call(s, s.request(GoalMsg.GOAL_REQUEST.value, GOAL)[1])
    t0 = trio.current_time()
    stub.clock_offset_ms = DAY
    stub.goal_timer.wake()
    [pushed] = s.receive(await ws.next_tun())
    assert isinstance(pushed, Push) and pushed.body.decision is Decision.EXPIRED
    assert trio.current_time() == t0 and pushed.body.req_id == queued.body.req_id
    await ws.aclose()
