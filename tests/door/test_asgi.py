"""`/v1/box` on plain ASGI (`ftwbridge/door/asgi.py`): the events hypercorn sends, without sockets.

The live paths (stub boxes, hostile upgrades, takeovers) run through it in tests/e2e and
tests/edge; these pin the ASGI edges that are hard to reach from a socket.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import trio

from ftwbridge.door.asgi import BoxGone, BoxSocket, DoorRoute


class Peer:
    """hypercorn's side of one WebSocket: the events it will deliver, and what the app sent."""

    def __init__(self, *events: dict[str, Any]) -> None:
        self.events = list(events)
        self.sent: list[MutableMapping[str, Any]] = []

    async def receive(self) -> MutableMapping[str, Any]:
        await trio.lowlevel.checkpoint()
        if not self.events:
            await trio.sleep_forever()
        return self.events.pop(0)

    async def send(self, event: MutableMapping[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        self.sent.append(event)


SCOPE = {"type": "websocket", "path": "/v1/box", "client": ("192.0.2.7", 5555)}


async def test_a_box_that_leaves_ends_the_uplink_quietly() -> None:
    peer = Peer(
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "bytes": b"\x01\x02"},
        {"type": "websocket.receive", "text": "hi"},
        {"type": "websocket.disconnect", "code": 1006},
    )
    got: list[str | bytes] = []
    addr: list[str] = []

    async def serve(ws: BoxSocket) -> None:
        addr.append(ws.remote_addr)
        while True:
            got.append(await ws.receive())

    await DoorRoute(None, serve)(SCOPE, peer.receive, peer.send)
    assert got == [b"\x01\x02", "hi"]
    assert addr == ["192.0.2.7"]
    assert [e["type"] for e in peer.sent] == ["websocket.accept"]  # no close to a gone peer


async def test_the_door_closing_sends_one_close_and_no_second() -> None:
    peer = Peer({"type": "websocket.connect"})

    async def serve(ws: BoxSocket) -> None:
        await ws.send(b"challenge")
        await ws.close(4401, "bad signature")
        with pytest.raises(BoxGone):
            await ws.close(1000)
        with pytest.raises(BoxGone):
            await ws.send(b"late")
        with pytest.raises(BoxGone):
            await ws.receive()

    await DoorRoute(None, serve)(SCOPE, peer.receive, peer.send)
    assert peer.sent == [
        {"type": "websocket.accept"},
        {"type": "websocket.send", "bytes": b"challenge"},
        {"type": "websocket.close", "code": 4401, "reason": "bad signature"},
    ]


async def test_a_handler_that_returns_on_an_open_socket_closes_it_normally() -> None:
    peer = Peer({"type": "websocket.connect"})

    async def serve(ws: BoxSocket) -> None:
        return None

    await DoorRoute(None, serve)(SCOPE, peer.receive, peer.send)
    assert peer.sent[-1] == {"type": "websocket.close", "code": 1000, "reason": ""}


async def test_a_peer_gone_before_the_upgrade_never_reaches_the_door() -> None:
    peer = Peer({"type": "websocket.disconnect", "code": 1006})
    served: list[BoxSocket] = []

    async def serve(ws: BoxSocket) -> None:
        served.append(ws)

    await DoorRoute(None, serve)(SCOPE, peer.receive, peer.send)
    assert served == [] and peer.sent == []


async def test_everything_else_goes_to_the_app() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(f"{scope['type']} {scope.get('path', '')}")

    async def serve(ws: BoxSocket) -> None:
        raise AssertionError("not the door's")

    route = DoorRoute(app, serve)
    peer = Peer()
    for scope in (
        {"type": "http", "path": "/v1/box"},
        {"type": "websocket", "path": "/mcp"},
        {"type": "websocket", "path": "/v1/box/"},
        {"type": "lifespan"},
    ):
        await route(scope, peer.receive, peer.send)
    assert seen == ["http /v1/box", "websocket /mcp", "websocket /v1/box/", "lifespan "]
