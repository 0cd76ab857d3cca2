"""The door's own listener (`door_bind`) under raw bytes: what a hostile peer sends before, during
and after the opening handshake ends that peer's connection alone, answered in the protocol's
own words (an HTTP status before the 101, a Close code after it), and leaves nothing behind.

The shared live bridge (`live.py`) binds the listener with `door_handshake_s` 3 s; every case
then checks that the bridge still serves (`LiveBridge.assert_serving`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

import pytest

from soak.strangers import frame

from .live import WAIT_S, WS_UPGRADE, LiveBridge, read_close_code, read_until_closed

HANDSHAKE_S = 3.0
"""The live bridge's `door_handshake_s`."""


def _head(path: str = "/v1/box", *, drop: str = "", extra: str = "", method: str = "GET") -> str:
    """A well-formed opening handshake, with `method`, `path`, a header line dropped (by its
    start) and `extra` header lines added."""
    text = method + WS_UPGRADE.format(path=path, host="door.test").removeprefix("GET")
    if drop:
        text = "\r\n".join(line for line in text.split("\r\n") if not line.startswith(drop))
    return text.removesuffix("\r\n") + extra + "\r\n"


HEADS: dict[str, tuple[bytes, int]] = {
    "another path": (_head("/mcp").encode(), 404),
    "the root": (_head("/").encode(), 404),
    "POST": (_head(method="POST").encode(), 405),
    "HTTP/1.0": (_head().replace("HTTP/1.1", "HTTP/1.0", 1).encode(), 400),
    "no Upgrade header": (_head(drop="Upgrade:").encode(), 426),
    "no Connection header": (_head(drop="Connection:").encode(), 426),
    "version 8": (_head().replace("Version: 13", "Version: 8").encode(), 426),
    "no key": (_head(drop="Sec-WebSocket-Key:").encode(), 400),
    "a key of 4 bytes": (_head().replace("dGhlIHNhbXBsZSBub25jZQ==", "AAAAAA==").encode(), 400),
    "a key not base64": (_head().replace("dGhlIHNhbXBsZSBub25jZQ==", "!!!!").encode(), 400),
    "a body": (_head(extra="Content-Length: 3\r\n").encode() + b"abc", 400),
    "a request line of garbage": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    "a NUL in a header": (_head(extra="X-A: a\x00b\r\n").encode(), 400),
    "a head of 200 KB": (_head(extra=f"X-A: {'a' * 200_000}\r\n").encode(), 431),
    "HTTP/2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 404),
}


@pytest.mark.parametrize("name", list(HEADS))
def test_bad_opening_handshakes_are_refused_in_words(live: LiveBridge, name: str) -> None:
    raw, status = HEADS[name]
    with live.connect(door=True) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(raw)
        answer = read_until_closed(sock, WAIT_S)  # the refusal ends the connection
    assert answer.startswith(b"HTTP/1.1 %d " % status), (name, answer[:120])
    live.assert_serving()


def test_half_a_handshake_gets_408_at_the_handshake_bound(live: LiveBridge) -> None:
    started = time.monotonic()
    with live.connect(door=True) as sock:
        sock.sendall(b"GET /v1/box HTTP/1.1\r\nHost: door.test\r\n")
        answer = read_until_closed(sock, WAIT_S)
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:120]
    assert HANDSHAKE_S - 0.5 < took < WAIT_S / 2, took
    live.assert_serving()


def test_slowloris_is_bounded_from_accept_not_per_byte(live: LiveBridge) -> None:
    """A byte every 0.2 s never completes a head: the bound runs from the accept."""
    raw = _head().encode()
    started = time.monotonic()
    with live.connect(door=True) as sock:
        for byte in raw[:-4]:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.2)
            if time.monotonic() - started > HANDSHAKE_S + 2:
                break
        answer = read_until_closed(sock, WAIT_S)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:120]
    assert time.monotonic() - started < HANDSHAKE_S + 5
    live.assert_serving()


@pytest.mark.parametrize(
    "garbage",
    [b"x" * 200, b"\x00" * 64, frame(2, b"\xa0", mask=False), bytes(range(256))],
    ids=["letters", "zeros", "unmasked", "every byte"],
)
def test_garbage_in_the_same_packet_as_the_upgrade(live: LiveBridge, garbage: bytes) -> None:
    """Bytes after the head, before the 101 went out: parsed as frames, failed with 1002."""
    with live.connect(door=True) as sock:
        sock.sendall(_head().encode() + garbage)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            assert chunk, data
            data += chunk
        assert data.startswith(b"HTTP/1.1 101 "), data[:100]
        assert read_close_code(sock, data.partition(b"\r\n\r\n")[2]) == 1002
    live.assert_serving()


def test_a_ping_is_answered_and_a_close_is_returned(live: LiveBridge) -> None:
    sock, data = live.upgrade()
    with sock:
        sock.sendall(frame(9, b"hi"))
        sock.settimeout(WAIT_S)
        while b"\x8a\x02hi" not in data:
            chunk = sock.recv(4096)
            assert chunk, data
            data += chunk
        sock.sendall(frame(8, b"\x03\xe8"))
        assert read_close_code(sock, data.partition(b"\x8a\x02hi")[2]) == 1000
        assert read_until_closed(sock, WAIT_S) == b""  # then the door closes the TCP connection


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_many_idle_connections_leave_nothing_behind(live: LiveBridge) -> None:
    """300 connections from one address that send nothing: past the listener's 256 strangers
    per address the newest are refused (429 in words at once, closed, and counted); the rest get 408 at the
    handshake bound; a box at another address is challenged meanwhile; every socket is let go."""
    pid = live.procs[0].pid
    before = _fds(pid)
    idle = []
    for _ in range(300):
        sock = socket.socket()
        sock.bind(("127.0.0.9", 0))
        sock.settimeout(WAIT_S)
        sock.connect(live.door)
        idle.append(sock)
    other = socket.socket()
    other.bind(("127.0.0.10", 0))
    other.settimeout(WAIT_S)
    other.connect(live.door)
    with other:
        other.sendall(_head().encode())
        data = b""
        while len(data.partition(b"\r\n\r\n")[2]) < 2:
            chunk = other.recv(4096)
            assert chunk, data
            data += chunk
        assert data.startswith(b"HTTP/1.1 101 "), data[:100]
    answers = [read_until_closed(sock, WAIT_S) for sock in idle]
    for sock in idle:
        sock.close()
    refused = sum(1 for a in answers if a.startswith(b"HTTP/1.1 429 "))
    timed_out = sum(1 for a in answers if a.startswith(b"HTTP/1.1 408 "))
    assert refused + timed_out == 300 and refused >= 300 - 256, (refused, timed_out)
    told = next(a for a in answers if a.startswith(b"HTTP/1.1 429 "))
    assert b"\r\nretry-after: 5\r\n" in told and told.endswith(b"try again in a few seconds.\n")
    counted = [
        float(line.rsplit(" ", 1)[1])
        for line in live.metrics().splitlines()
        if line.startswith("ftwbridge_strangers_turned_away_total{")
        and 'listener="door"' in line
        and 'how="refused"' in line
    ]
    assert counted and counted[0] >= refused, counted
    deadline = time.monotonic() + WAIT_S
    while _fds(pid) > before + 2:
        assert time.monotonic() < deadline, "the idle connections' sockets stay open"
        time.sleep(0.05)
    live.assert_serving()
