"""A stranger turned away by a hypercorn listener's quota (ftwbridge/edge/guard.py;
docs/operations.md, "Limits that strangers cannot fill") is told why in HTTP's form, at no cost
beyond the close: 429 with `Retry-After` when its address holds its share, 503 when it is shed
for a lighter address's; then its socket closes. Raw loopback sockets from several addresses
against `edge.serve` with a small quota (4 in all, 2 per address)."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from ftwbridge.fairshare import Slots

from .live import WAIT_S
from .test_writes import _serve


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _until_closed(stream: trio.SocketStream) -> bytes:
    got = b""
    while chunk := await stream.receive_some(65536):
        got += chunk
    return got


def _jsonrpc_words(answer: bytes) -> str:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\ncontent-type: application/json\r\n" in head and b"connection: close" in head
    value = json.loads(body)
    assert value["jsonrpc"] == "2.0" and value["id"] is None
    return str(value["error"]["message"])


async def test_strangers_turned_away_are_told_429_or_503_in_words() -> None:
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            port = await _serve(nursery, _app, strangers=Slots(4, 2))
            await trio.testing.wait_all_tasks_blocked(0.05)  # the probe of `_serve` has left

            async def idle(source: str) -> trio.SocketStream:
                stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source)
                await trio.testing.wait_all_tasks_blocked(0.05)  # accepted, in its slot
                return stream

            held = [await idle("127.0.0.2"), await idle("127.0.0.2")]
            third = await idle("127.0.0.2")  # its address holds its share: refused
            refused = await _until_closed(third)
            assert refused.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
            assert b"\r\nretry-after: 5\r\n" in refused
            assert _jsonrpc_words(refused).startswith("This address holds too many connections")
            held += [await idle("127.0.0.3"), await idle("127.0.0.3")]  # the total is full
            lighter = await idle("127.0.0.4")  # sheds the oldest of the heaviest address
            shed = await _until_closed(held[0])
            assert shed.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
            assert b"\r\nretry-after: 2\r\n" in shed
            assert "this address held the most" in _jsonrpc_words(shed)
            await lighter.send_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await lighter.receive_some(65536)).startswith(b"HTTP/1.1 404 ")
            for stream in [*held, third, lighter]:
                await trio.aclose_forcefully(stream)
            nursery.cancel_scope.cancel()
