"""Strangers at the door: garbage and oversized traffic on `/v1/box` over raw sockets.

Each stranger opens its own TCP connection and reports what the bridge said last: `400` (an
HTTP answer's status), a WebSocket Close code, `closed` (the bridge closed without a word), or
`none` (the bridge neither answered nor closed within the bound).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Awaitable, Callable

import trio

from ftwbridge.proto.door import CLOSE_BAD_MESSAGE, CLOSE_BAD_SIGNATURE, MAX_MESSAGE_BYTES

UPGRADE = (
    "GET /v1/box HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
OVERSIZED_BYTES = 1024 * 1024
"""One oversized message: 1 MiB, sixteen times the door's limit."""


def frame(
    opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0, mask: bool = True
) -> bytes:
    """One RFC 6455 section 5.2 frame as a client writes it (masked unless `mask=False`;
    `fin` and the `rsv` bits as given, so tests can write frames a server must refuse)."""
    n = len(payload)
    bit = 0x80 if mask else 0
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    if n < 126:
        head += bytes([bit | n])
    elif n < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    keystream = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    body = (int.from_bytes(payload, "big") ^ keystream).to_bytes(n, "big")
    return head + key + body


def close_code(data: bytes) -> int | None:
    """The code of the first whole server Close frame in `data` (1005 when it has none)."""
    while len(data) >= 2:
        opcode, n, off = data[0] & 0x0F, data[1] & 0x7F, 2
        if n == 126:
            n, off = struct.unpack("!H", data[2:4])[0], 4
        elif n == 127:
            n, off = struct.unpack("!Q", data[2:10])[0], 10
        if len(data) < off + n:
            return None
        if opcode == 0x8:
            payload = data[off : off + n]
            return int(struct.unpack("!H", payload[:2])[0]) if len(payload) >= 2 else 1005
        data = data[off + n :]
    return None


async def _last_words(stream: trio.SocketStream, data: bytes, *, websocket: bool) -> str:
    """Read until the bridge closes: its Close code (WebSocket), its status (HTTP), or
    `closed` when it said nothing."""
    while True:
        if websocket:
            code = close_code(data)
            if code is not None:
                return str(code)
        try:
            chunk = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            chunk = b""
        if not chunk:
            if not websocket and data.startswith(b"HTTP/1.1 "):
                return data[9:12].decode()
            return "closed"
        data += chunk


async def _upgraded(stream: trio.SocketStream, host: str) -> bytes:
    """Upgrade to a WebSocket on `/v1/box`; returns what followed the 101's head."""
    await stream.send_all(UPGRADE.format(host=host).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            raise trio.BrokenResourceError("closed before the 101")
        data += chunk
    return data.partition(b"\r\n\r\n")[2]


async def _send_quietly(stream: trio.SocketStream, data: bytes) -> None:
    """Send what the bridge may stop reading halfway (it closes on a message too big)."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)


Stranger = Callable[[trio.SocketStream, str], Awaitable[str]]


async def raw_bytes(stream: trio.SocketStream, host: str) -> str:
    """Random bytes where an HTTP request should be."""
    await _send_quietly(stream, b"\x16\x03\x01" + os.urandom(509) + b"\r\n\r\n")
    return await _last_words(stream, b"", websocket=False)


async def bad_frames(stream: trio.SocketStream, host: str) -> str:
    """A frame that breaks RFC 6455 section 5 (a client frame without its mask)."""
    rest = await _upgraded(stream, host)
    await _send_quietly(stream, frame(0x2, b"\xa1at\x00" * 8, mask=False))
    return await _last_words(stream, rest, websocket=True)


async def bad_cbor(stream: trio.SocketStream, host: str) -> str:
    """A well-formed WebSocket message that is not the door's CBOR."""
    rest = await _upgraded(stream, host)
    await _send_quietly(stream, frame(0x2, b"\xff\xfe not cbor at all"))
    return await _last_words(stream, rest, websocket=True)


async def oversized(stream: trio.SocketStream, host: str) -> str:
    """One 1 MiB message before authenticating (the door's limit is 64 KiB)."""
    rest = await _upgraded(stream, host)
    await _send_quietly(stream, frame(0x2, os.urandom(OVERSIZED_BYTES)))
    return await _last_words(stream, rest, websocket=True)


async def silent(stream: trio.SocketStream, host: str) -> str:
    """Upgrade, then never say `door.hello`."""
    rest = await _upgraded(stream, host)
    return await _last_words(stream, rest, websocket=True)


async def knock(stream: trio.SocketStream, host: str) -> str:
    """Connect and hang up at once (a scanner)."""
    return "closed"


KINDS: dict[str, tuple[Stranger, str]] = {
    "bytes": (raw_bytes, "400"),
    "frames": (bad_frames, "1002"),
    "cbor": (bad_cbor, str(CLOSE_BAD_MESSAGE)),
    "oversized": (oversized, "1009"),
    "silent": (silent, str(CLOSE_BAD_SIGNATURE)),
    "knock": (knock, "closed"),
}
"""Each kind of stranger and what the bridge should say to it last."""
assert MAX_MESSAGE_BYTES < OVERSIZED_BYTES


async def visit(kind: str, port: int, bound_s: float) -> str:
    """One stranger of `kind` at 127.0.0.1:`port`; returns what the bridge said last, or
    `none` if it neither answered nor closed within `bound_s` seconds."""
    run, _expected = KINDS[kind]
    with trio.move_on_after(bound_s):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            try:
                return await run(stream, f"127.0.0.1:{port}")
            except trio.BrokenResourceError:
                return "closed"
    return "none"
