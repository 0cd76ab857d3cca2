"""The box WebSocket on plain ASGI: `/v1/box` goes from hypercorn straight to the door.

Quart's WebSocket wrapper costs a task hop per frame from the box (its reader task copies each
message into a channel the handler reads) and two signal dispatches per frame each way. The
door needs none of it: it reads and writes whole binary messages. `DoorRoute` takes the
WebSocket scope for `/v1/box` before Quart sees it and hands the door a `BoxSocket`, which
speaks the ASGI WebSocket messages (ASGI spec, "WebSocket" section) directly; every other scope
(HTTP, lifespan, other WebSocket paths) goes to the Quart app unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
import trio

from ftwbridge.door.tunnel import WS_GONE

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[..., Awaitable[None]]  # any ASGI 3 app (Quart's types its events finer)

DOOR_PATH = "/v1/box"


class BoxGone(trio.ClosedResourceError):
    """The box's side of the WebSocket ended (ASGI `websocket.disconnect`, or after our close)."""


class BoxSocket:
    """One box's WebSocket as the door uses it (`door.tunnel.WebSocketLike`).

    `receive()` returns one whole message (bytes, or str for a text frame) and raises `BoxGone`
    once the peer has gone; `send(data)` sends one binary message (a send after the stream
    closed is dropped by hypercorn); `close(code, reason)` sends a Close frame once, and raises
    `BoxGone` if it was already closed. Message size limits are hypercorn's
    (`websocket_max_message_size`), enforced before a message reaches here.
    """

    __slots__ = ("_receive", "_send", "closed", "remote_addr")

    def __init__(self, receive: Receive, send: Send, remote_addr: str) -> None:
        self._receive = receive
        self._send = send
        self.closed = False
        self.remote_addr = remote_addr

    async def accept(self) -> bool:
        """Wait for the upgrade request and accept it; False if the peer left first."""
        event = await self._receive()
        if event["type"] != "websocket.connect":
            self.closed = True
            return False
        try:
            await self._send({"type": "websocket.accept"})
        except (h11.LocalProtocolError, *WS_GONE):
            self.closed = True  # the connection broke during the handshake: `edge` counts it
            return False
        return True

    async def receive(self) -> str | bytes:
        """The next whole message from the box. Raises `BoxGone` once it has gone."""
        if self.closed:
            raise BoxGone("the box's WebSocket is closed")
        event = await self._receive()
        if event["type"] == "websocket.receive":
            data = event.get("bytes")
            if data is not None:
                return bytes(data)
            text = event.get("text")
            return text if isinstance(text, str) else ""
        self.closed = True  # websocket.disconnect
        raise BoxGone(f"the box left (code {event.get('code', 1005)})")

    async def send(self, data: bytes) -> None:
        """Send one binary message. Raises `BoxGone` after a close."""
        if self.closed:
            raise BoxGone("the box's WebSocket is closed")
        await self._send({"type": "websocket.send", "bytes": data})

    async def close(self, code: int, reason: str = "") -> None:
        """Send a Close frame with `code` (RFC 6455 §7.4) once. Raises `BoxGone` if already
        closed (`close_ws` treats that as done)."""
        if self.closed:
            raise BoxGone("the box's WebSocket is closed")
        self.closed = True
        await self._send({"type": "websocket.close", "code": code, "reason": reason})


class DoorRoute:
    """An ASGI app: the `/v1/box` WebSocket to `serve(BoxSocket)`, everything else to `app`.

    `serve` is `Door.serve_uplink`. When it returns on a socket still open, the socket is
    closed with 1000; the box leaving (`BoxGone`) ends it quietly.
    """

    __slots__ = ("app", "serve", "source")

    def __init__(
        self,
        app: Asgi,
        serve: Callable[[BoxSocket], Awaitable[None]],
        source: Callable[[Scope], str] | None = None,
    ) -> None:
        self.app = app
        self.serve = serve
        self.source = source
        """The box's address from its upgrade request (the client behind trusted proxies),
        or None for the TCP peer's."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket" or scope.get("path") != DOOR_PATH:
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("?", 0)
        address = str(client[0]) if self.source is None else self.source(scope)
        ws = BoxSocket(receive, send, address)
        if not await ws.accept():
            return
        with contextlib.suppress(BoxGone):
            await self.serve(ws)
        if not ws.closed:
            with contextlib.suppress(*WS_GONE):
                await ws.close(1000)
