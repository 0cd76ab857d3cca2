"""What one WebSocket round trip at the door costs on the door's own listener (wsproto on a trio
stream), against a floor with no WebSocket at all. (The main listener, hypercorn, served the
door too until it refused `/v1/box`; docs/performance.md keeps its last figures.)

    python bench/door_roundtrip.py [--messages 2000] [--size 200]

Runs each server in turn under valgrind's callgrind with counting off, an echo of the door's
`WebSocketLike` in place of `Door.serve_uplink` (`receive` then `send`, as the door relays a
`tun`), and a raw-socket client in the same process that sends one masked binary message and
reads its echo, `--messages` times; counting is on (`callgrind_control`) for those round trips
only. Prints the instructions per round trip of each, server and client together; `raw`, a
server that writes the answer's bytes for each read with no WebSocket at all, is the floor
(the client, trio's socket reads and writes, the scheduler): what is above it is the server's
WebSocket. A figure the machine's other load cannot move.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from callgrind import total  # type: ignore[import-not-found]

from ftwbridge.door.listener import DoorListener, DoorListenerSettings, serve_door_listener

UPGRADE = (
    b"GET /v1/box HTTP/1.1\r\nHost: b\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


def masked(payload: bytes) -> bytes:
    """One masked binary frame (RFC 6455 section 5.2), 126 <= len < 65536 or below 126."""
    mask = b"\x01\x02\x03\x04"
    n = len(payload)
    head = bytes([0x82, 0x80 | n]) if n < 126 else bytes([0x82, 0xFE]) + n.to_bytes(2, "big")
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + body


async def echo(ws: Any) -> None:
    while True:
        await ws.send(await ws.receive())


async def raw_echo(stream: trio.SocketStream) -> None:
    """The floor: no WebSocket at all, the answer's bytes written for each read (the 101 to
    the upgrade, then the echo's length in zeros)."""
    await stream.receive_some(65536)
    await stream.send_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
    while data := await stream.receive_some(65536):
        n = len(data) - 4 - (2 if len(data) - 6 < 126 else 4)
        await stream.send_all(bytes(n + (2 if n < 126 else 4)))


async def start(nursery: trio.Nursery, which: str) -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = int(sock.getsockname()[1])
    if which == "raw":
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock))]
        nursery.start_soon(trio.serve_listeners, raw_echo, listeners)
    else:
        settings = DoorListenerSettings(handshake_s=10, silence_s=45, ping_s=15, max_message=65536)
        await nursery.start(serve_door_listener, DoorListener(echo, settings), sock)
    return port


async def child(which: str, messages: int, size: int) -> None:
    async with trio.open_nursery() as nursery:
        port = await start(nursery, which)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(UPGRADE)
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(4096)
        frame = masked(os.urandom(size))
        want = size + (2 if size < 126 else 4)

        async def round_trip() -> None:
            await stream.send_all(frame)
            got = 0
            while got < want:
                got += len(await stream.receive_some(65536))

        for _ in range(100):  # warm
            await round_trip()
        print("ready", flush=True)
        await trio.wrap_file(sys.stdin).readline()
        for _ in range(messages):
            await round_trip()
        print("done", flush=True)
        await trio.wrap_file(sys.stdin).readline()
        nursery.cancel_scope.cancel()


def count(which: str, messages: int, size: int) -> float:
    """Instructions per round trip of server `which` (`raw` or `own`), in millions."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        argv += [sys.executable, __file__, "--child", which]
        argv += ["--messages", str(messages), "--size", str(size)]
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdin is not None and proc.stdout is not None
        for word, switch in (("ready", "on"), ("done", "off")):
            while (line := proc.stdout.readline().decode()).strip() != word:
                if not line:
                    raise RuntimeError(f"the {which} child exited before {word!r}")
            subprocess.run(
                ["callgrind_control", "-i", switch, str(proc.pid)], check=True, capture_output=True
            )
            proc.stdin.write(b"\n")
            proc.stdin.flush()
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
        proc.stdin.close()
        proc.wait(timeout=120)
        counted = total(out)
    return counted / messages / 1e6


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--size", type=int, default=200)
    p.add_argument("--child", default="")
    args = p.parse_args()
    if args.child:
        trio.run(child, args.child, args.messages, args.size)
    else:
        figures = {w: round(count(w, args.messages, args.size), 4) for w in ("raw", "own")}
        print(json.dumps({"minstr_per_round_trip": figures}))
