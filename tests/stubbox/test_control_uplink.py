"""The stub home's shell with real sockets: a goal request, the owner's decision pushed while a
read is in flight, and a command, through a door on 127.0.0.1 (a WebSocket server in this
test) and the stub's own `run_uplink`. The agent's side is our `AgentSession`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import trio
from trio_websocket import WebSocketConnection, WebSocketRequest, serve_websocket

from ftwbridge.proto.control import CmdResult, Decided, GoalQueued, Hold, new_cmd_id
from ftwbridge.proto.door import tun, tun_fields
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.names import GoalMsg, Read
from ftwbridge.proto.noise import Initiator, generate_static
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Acked, AgentSession, Failed, Push, Reply
from stubbox.dial import run_uplink
from stubbox.state import state_path
from stubbox.uplink import StubHome
from tests.stubbox.test_control_pair import CONTROL, DAY, EVENING

WAIT_S = 30.0
"""Bound on every real-time wait here (a loaded 2-core machine)."""


class Door:
    """One uplink seen from the bridge's side: authenticate it loosely, carry one tunnel."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws

    async def next_tun(self) -> bytes:
        while True:
            env = decode_envelope(await self.ws.get_message())
            if env.t == Msg.TUN:
                return tun_fields(env.b)[1]

    async def call(self, session: AgentSession, message: bytes, now_ms: int) -> list[Any]:
        await self.ws.send_message(tun(1, message))
        events: list[Any] = []
        while not events or session.busy:
            events += session.receive(await self.next_tun(), now_ms=now_ms)
        return events


async def test_goal_and_command_through_a_real_uplink(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    start = time.monotonic()
    stub = StubHome("h1", seed="h1", clock=lambda: EVENING + int((time.monotonic() - start) * 1000))
    private, key = generate_static()
    grant = AgentGrant("a1", "c", "A", CONTROL, ("loadpoint.hold",), {}, EVENING, EVENING + DAY)
    path = state_path(tmp_path, "h1")
    uplinks: trio.MemorySendChannel[WebSocketConnection]
    uplinks, arrived = trio.open_memory_channel[WebSocketConnection](1)

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await uplinks.send(ws)
        await trio.sleep_forever()

    with trio.fail_after(WAIT_S):
        await stub.keep_state(path)
        await stub.put_agent(key, grant)
        [server] = [await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)]
        nursery.start_soon(run_uplink, stub, f"ws://127.0.0.1:{server.port}/v1/box")
        door = Door(await arrived.receive())
        challenge = {"nonce": os.urandom(16), "nowMs": EVENING}
        await door.ws.send_message(Envelope(Msg.DOOR_CHALLENGE, None, challenge).encode())
        await stub.connected.wait()
        ini = Initiator(our_static=private, their_static=stub.owner.noise_public)
        await door.ws.send_message(tun(1, ini.write_message1()))
        keys, _ = ini.read_message2(await door.next_tun())
        s = AgentSession(keys)
        [hello_ok] = await door.call(s, s.notify(Msg.HELLO, {}), stub.wall_ms())
        assert isinstance(hello_ok, Push) and hello_ok.body["ops"] == ["loadpoint.hold"]
        await door.call(s, s.request(Read.LOADPOINTS_GET.value)[1], stub.wall_ms())

        goal = {
            "goal": "ev_target",
            "args": {"car": "car1", "soc_permille": 900, "byMs": EVENING + DAY},
        }
        [queued] = await door.call(
            s, s.request(GoalMsg.GOAL_REQUEST.value, goal)[1], stub.wall_ms()
        )
        assert isinstance(queued.body, GoalQueued)
        # the request is on disk before the agent heard of it
        [row] = json.loads(path.read_text())["goals"]
        assert row["reqId"] == queued.body.req_id and row["state"] == "pending"

        rid, read = s.request(Read.CARS_GET.value)  # a read in flight when the owner decides
        await stub.decide(queued.body.req_id, True)
        [pushed] = s.receive(await door.next_tun())
        assert isinstance(pushed, Push) and isinstance(pushed.body, Decided)
        assert s.busy  # the push answered no call
        [cars] = await door.call(s, read, stub.wall_ms())
        assert cars.id == rid and cars.body["cars"][0]["target_soc_permille"] == 900

        cmd_id = new_cmd_id(stub.wall_ms(), os.urandom(10))
        args = Hold("lp1", 11_000, 60).to_args()
        # the approval moved controlRev: the box refuses the stale revision, the bridge reads
        # again and tries once more with the same cmdId (part E)
        _rid, cmd = s.command("loadpoint.hold", args, cmd_id=cmd_id, now_ms=stub.wall_ms())
        [conflict] = await door.call(s, cmd, stub.wall_ms())
        assert isinstance(conflict, Failed) and conflict.refusal.code == "E_CONFLICT"
        await door.call(s, s.request(Read.LOADPOINTS_GET.value)[1], stub.wall_ms())
        _rid, cmd = s.command("loadpoint.hold", args, cmd_id=cmd_id, now_ms=stub.wall_ms())
        ack, result = await door.call(s, cmd, stub.wall_ms())
        assert isinstance(ack, Acked) and isinstance(result, Reply)
        assert isinstance(result.body, CmdResult) and result.body.observed is not None
        assert result.body.observed["power_w"] == 10_350  # 15 A on three phases, not 11 kW
    assert stub.box.commands.stats.acted == 1
