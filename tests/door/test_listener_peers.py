"""The door's own listener (`door/listener.py`) over trio's lockstep streams (a write waits for
the other end's read) with MockClock: what one connection's peer does ends that connection
alone, and the operator reads what happened in words."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing
from wsproto.connection import Connection, ConnectionType
from wsproto.events import Ping

from ftwbridge.door.listener import DoorListener, DoorListenerSettings
from ftwbridge.door.wsock import LeanSocket
from tests.edge.live import WS_UPGRADE

SETTINGS = DoorListenerSettings(handshake_s=5.0, silence_s=45.0, ping_s=15.0, max_message=65536)


async def test_a_box_that_pings_and_reads_no_pong_is_let_go_without_a_fault(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Its Pongs fill the socket; the door lets it go after `wsock.SEND_S`. That broke no rule
    of RFC 6455, so it is no connection fault: before, it was counted as one and logged as
    `connection fault from ? (websocket): ExceptionGroup: Exceptions from Trio nursery (1
    sub-exception)`, a sentence that named neither the peer nor what happened."""
    caplog.set_level(logging.DEBUG)

    async def serve(ws: LeanSocket) -> None:
        while True:
            await ws.receive()

    faults: list[str] = []
    listener = DoorListener(serve, SETTINGS, faults.append)
    client, server = trio.testing.lockstep_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.handle, server)
        await client.send_all(WS_UPGRADE.format(path="/v1/box", host="door.test").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += await client.receive_some(65536)
        assert head.startswith(b"HTTP/1.1 101 ")
        box = Connection(ConnectionType.CLIENT)
        with pytest.raises(trio.BrokenResourceError):  # let go: our end is closed
            for _ in range(1000):
                await client.send_all(box.send(Ping(b"p" * 100)))
    assert faults == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("the door let ? go: it took no bytes" in r.getMessage() for r in caplog.records)
    assert listener.connections.by_state() == dict.fromkeys(listener.connections.by_state(), 0)
