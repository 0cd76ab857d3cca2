"""The keep-alive timer (`idle.IdleTimer`): one task per connection, hypercorn's behaviour.

hypercorn closes an HTTP/1.1 connection that stays idle for `keep_alive_timeout` seconds, and
an idle one at once when the server stops; a connection with a request under way is never
closed for idleness. The timing runs on trio's MockClock; the last test checks a real socket.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.idle import IdleTimer

from .live import WAIT_S, LiveBridge

KEEP_ALIVE_S = 5.0


class Stopping:
    """hypercorn's `context.terminated`: `wait()` and `is_set()`."""

    def __init__(self) -> None:
        self.event = trio.Event()

    async def wait(self) -> None:
        await self.event.wait()

    def is_set(self) -> bool:
        return self.event.is_set()


class Group:
    """hypercorn's `TaskGroup`, counting what the timer spawns."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.spawned = 0

    def spawn(self, fn: Any, *args: Any) -> None:
        self.spawned += 1
        self.nursery.start_soon(fn, *args)


async def _rig(nursery: trio.Nursery) -> tuple[IdleTimer, Stopping, Group, list[float]]:
    closed: list[float] = []
    stopping = Stopping()

    async def close() -> None:
        closed.append(trio.current_time())

    return IdleTimer(KEEP_ALIVE_S, stopping, close), stopping, Group(nursery), closed


async def test_an_idle_connection_closes_after_keep_alive_and_a_busy_one_never(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with trio.open_nursery() as nursery:
        timer, _, group, closed = await _rig(nursery)
        t0 = trio.current_time()
        for _ in range(50):  # requests, each after 1 s idle: no close, one task in all
            await timer.restart(group)
            await trio.sleep(1)
            await timer.stop()
            await trio.sleep(60)  # a slow call: busy, so never closed for idleness
        assert closed == [] and group.spawned == 1
        await timer.restart(group)
        await trio.sleep(KEEP_ALIVE_S * 3)
    assert closed == [t0 + 50 * 61 + KEEP_ALIVE_S]


async def test_a_stopping_server_closes_idle_connections_at_once_and_busy_ones_when_done(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with trio.open_nursery() as nursery:
        timer, stopping, group, closed = await _rig(nursery)
        await timer.restart(group)
        await timer.stop()  # busy when the server starts stopping
        await trio.sleep(1)
        stopping.event.set()
        await trio.sleep(30)
        assert closed == []
        t = trio.current_time()
        await timer.restart(group)  # the request is done
    assert closed == [t]

    async with trio.open_nursery() as nursery:
        timer, stopping, group, closed = await _rig(nursery)
        await timer.restart(group)
        await trio.sleep(1)
        t = trio.current_time()
        stopping.event.set()
    assert closed == [t]


async def test_an_ended_connection_leaves_no_timer_and_no_close(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with trio.open_nursery() as nursery:
        timer, _, group, closed = await _rig(nursery)
        await timer.restart(group)
        await trio.sleep(1)
        timer.end()  # the nursery closes: the timer's task has returned
    assert closed == []


def test_a_real_keep_alive_connection_is_closed_when_idle(live: LiveBridge) -> None:
    keep_alive_s = Config().keep_alive_s  # the live bridge keeps the default
    with socket.create_connection(live.main, timeout=WAIT_S) as sock:
        host, port = live.main
        sock.sendall(
            f"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        )
        got = b""
        while b"\r\n\r\n" not in got:
            got += sock.recv(65536)
        assert got.startswith(b"HTTP/1.1 200")
        answered = time.monotonic()
        while sock.recv(65536):  # the rest of the answer, then the server's end
            pass
        idle_s = time.monotonic() - answered
    assert keep_alive_s - 0.5 <= idle_s < keep_alive_s + WAIT_S, idle_s


async def _after_keep_alive(port: int, data: bytes) -> tuple[bytes, float]:
    """Send `data` and read until the listener closes: what came and how long it took."""
    from tests.edge.test_writes import GET

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    start = trio.current_time()
    got = b""
    async with stream:
        await stream.send_all(data)
        if data == GET:  # its answer first, then the wait
            while b"\r\n\r\n" not in got:
                got += await stream.receive_some(65536)
            start, got = trio.current_time(), b""
        while chunk := await stream.receive_some(65536):
            got += chunk
    return got, trio.current_time() - start


async def test_part_of_a_head_at_the_keep_alive_time_is_told_408(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A connection closed by the keep-alive timer with part of a request head in (a slow
    sender, slowloris) reads a 408 in words; one that sent nothing, or nothing after its
    answer, is closed without a word, as before (RFC 9112 section 9.6)."""
    from tests.edge.test_writes import GET, _serve

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        keep_alive_s = 5.0  # hypercorn's default, kept by `edge.EdgeConfig`
        got, took = await _after_keep_alive(port, b"GET /x HTTP/1.1\r\nHost: t\r\nX-A: a")
        assert took >= keep_alive_s and got.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        assert b"No whole request head came" in got and b"\r\nconnection: close\r\n" in got
        assert await _after_keep_alive(port, b"") == (b"", keep_alive_s)
        got, took = await _after_keep_alive(port, GET)
        assert got == b"" and took == keep_alive_s
        nursery.cancel_scope.cancel()
