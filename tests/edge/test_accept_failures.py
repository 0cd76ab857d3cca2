"""What every listener's accept loop does when accept(2) fails for want of resources (EMFILE:
the process's file table is full): the operator meets one sentence and then one per
`ACCEPT_LOG_S` with a count, never trio's traceback ten times a second, and the listener serves
again once a file is free (`ftwbridge.listening.PatientListener`; docs/operations.md, "When
accept fails"). The line-rate runs on trio's MockClock; each listener's wiring on real
loopback sockets, its accepts failing by a patched `trio.SocketListener.accept`."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.door.listener import DoorListener, DoorListenerSettings, serve_door_listener
from ftwbridge.listening import ACCEPT_LOG_S, PatientListener, peer_host, say_at_once
from ftwbridge.mesh.listener import InternalListener, InternalSettings, serve_internal

from .live import WAIT_S
from .test_writes import _serve


class FullFileTable(trio.abc.Listener[trio.abc.Stream]):
    """A listener whose accept fails with EMFILE until `until` (trio time), then gives one
    memory stream and waits for ever."""

    def __init__(self, until: float) -> None:
        self.until = until
        self.calls = 0
        self.given = False

    async def accept(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        if trio.current_time() < self.until:
            raise OSError(errno.EMFILE, "Too many open files")
        if self.given:
            await trio.sleep_forever()
        self.given = True
        return trio.testing.memory_stream_pair()[1]

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_a_full_file_table_is_a_sentence_every_few_seconds_not_a_traceback(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FullFileTable(until=60.0)
    served = trio.Event()

    async def handler(stream: trio.abc.Stream) -> None:
        served.set()

    patient = PatientListener(fake, "the listener on http://203.0.113.1:8780")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handler, [patient])
        await served.wait()  # the first accept after the spell serves its connection
        nursery.cancel_scope.cancel()
    assert fake.calls > 500  # tried every 0.1 s for 60 s
    assert not [r for r in caplog.records if r.name == "trio.serve_listeners"]
    lines = [r for r in caplog.records if r.name == "ftwbridge.listeners"]
    assert all(r.exc_info is None for r in lines)  # sentences, no traceback
    assert len(lines) <= 2 + 60 / ACCEPT_LOG_S
    first, *middle, last = (r.getMessage() for r in lines)
    assert first.startswith("the listener on http://203.0.113.1:8780 cannot accept connections")
    assert "ulimit -n" in first and "(EMFILE)" in first
    assert middle and all("failed accepts since its last line" in line for line in middle)
    assert sum(int(line.split("; ")[1].split()[0]) for line in middle) > 400  # each counted
    assert last.startswith("the listener on http://203.0.113.1:8780 accepts connections again")
    assert patient.failures.failed == fake.calls - 2  # less the accept that worked, and the last


async def _door(nursery: trio.Nursery, sock: socket.socket) -> None:
    async def serve(ws: Any) -> None:
        raise AssertionError("no uplink is opened here")

    settings = DoorListenerSettings(handshake_s=5.0, silence_s=5.0, ping_s=5.0, max_message=1024)
    await nursery.start(serve_door_listener, DoorListener(serve, settings), sock)


async def _internal(nursery: trio.Nursery, sock: socket.socket) -> None:
    settings = InternalSettings(max_body_bytes=100, body_s=5.0, idle_s=5.0, write_s=5.0)
    await nursery.start(serve_internal, InternalListener({}, settings), sock)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": []})
    await send({"type": "http.response.body", "body": b""})


Start = Callable[[trio.Nursery, socket.socket], Awaitable[Any]]


def fail_accepts(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """Make every `trio.SocketListener`'s next `times` accepts fail with EMFILE; returns a
    one-item list holding how many failures are still to come."""
    original = trio.SocketListener.accept
    left = [times]

    async def accept(self: trio.SocketListener) -> trio.SocketStream:
        if left[0]:
            left[0] -= 1
            await trio.lowlevel.checkpoint()
            raise OSError(errno.EMFILE, "Too many open files")
        return await original(self)

    monkeypatch.setattr(trio.SocketListener, "accept", accept)
    return left


@pytest.mark.parametrize("which", ["door", "internal", "edge"])
async def test_each_listener_waits_out_emfile_in_words_and_serves_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    caplog.set_level(logging.DEBUG)
    failures = fail_accepts(monkeypatch, 3)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            if which == "edge":
                port = await _serve(nursery, _app)
            else:
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                sock.listen(16)
                port = sock.getsockname()[1]
                await (_door if which == "door" else _internal)(nursery, sock)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n")
                got = await stream.receive_some(65536)
            assert got.startswith(b"HTTP/1.1 404 ")  # served once a file was free
            nursery.cancel_scope.cancel()
    assert failures == [0]
    assert not [r for r in caplog.records if r.name == "trio.serve_listeners"]
    said = [r.getMessage() for r in caplog.records if r.name == "ftwbridge.listeners"]
    assert said and "cannot accept connections" in said[0] and "(EMFILE)" in said[0]
    assert "accepts connections again" in said[-1]


async def test_the_peer_of_a_stream_is_found_through_tls_and_is_unknown_elsewhere() -> None:
    """`peer_host` sees through TLS (the hypercorn guard once keyed every TLS peer as "?")."""
    import ssl

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        client = await trio.open_tcp_stream("127.0.0.1", listening.getsockname()[1])
        async with client:
            assert peer_host(client) == "127.0.0.1"
            context = ssl.create_default_context()
            assert peer_host(trio.SSLStream(client, context, server_hostname="t")) == "127.0.0.1"
    assert peer_host(client) == "?"  # closed: its peer is gone
    memory = trio.testing.memory_stream_pair()[0]
    assert peer_host(memory) == "?"
    assert say_at_once(memory, b"words") is False  # only a plain socket is written so
