"""The stub box's uplink shell: what it publishes while its uplink comes up."""

from __future__ import annotations

import os
from typing import Any

import trio

from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant, verify_roster
from stubbox.uplink import StubHome


class SlowDoor:
    """A door whose socket takes the box's first roster slowly (the uplink still connecting)."""

    def __init__(self) -> None:
        self.sent: list[Envelope] = []
        self.release = trio.Event()
        self.roster_arriving = trio.Event()
        self._challenged = False

    async def get_message(self) -> bytes:
        if not self._challenged:
            self._challenged = True
            body = {"nonce": os.urandom(16), "nowMs": 0}
            return Envelope(Msg.DOOR_CHALLENGE, None, body).encode()
        await trio.sleep_forever()
        raise AssertionError

    async def send_message(self, data: Any) -> None:
        env = decode_envelope(data)
        if env.t == Msg.ROSTER and not self.roster_arriving.is_set():
            self.roster_arriving.set()
            await self.release.wait()
        self.sent.append(env)


async def test_an_approval_made_while_connecting_reaches_the_bridge(
    nursery: trio.Nursery,
) -> None:
    stub = StubHome("h1", seed="h1")
    door = SlowDoor()
    nursery.start_soon(stub.run_session, door)
    with trio.fail_after(5):
        await door.roster_arriving.wait()
    grant = AgentGrant("a1", "c", "Assistant", ("ftw.live.read",), (), {}, 0, 2**62)
    seq = await stub.put_agent(b"\x01" * 32, grant)  # the owner approves: no uplink yet
    door.release.set()
    with trio.fail_after(5):
        await stub.connected.wait()
    rosters = [e.b["roster"] for e in door.sent if e.t == Msg.ROSTER]
    key = stub.owner.home_public_key
    newest = verify_roster(rosters[-1], home_key=key, home="h1")
    assert newest.seq == seq and b"\x01" * 32 in newest.agents()
