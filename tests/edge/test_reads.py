"""The read every listener's connection makes (`ftwbridge.listening.receive_when_readable`,
the edge's read loop and the door's `LeanSocket`): it waits for the socket first and then asks
it once, so a read whose bytes have not come yet costs no failed `read` (trio's own tries
first); it ends, fails and is cancelled as trio's `receive_some` does. Over real loopback TCP
sockets; the reads are counted by wrapping `os.read`."""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge import listening
from ftwbridge.listening import receive_when_readable

from .live import WAIT_S


@pytest.fixture
async def pair() -> AsyncIterator[tuple[trio.SocketStream, socket.socket]]:
    """(our side as a `trio.SocketStream`, the peer's plain socket) of one TCP connection."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    peer = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    ours = await listeners[0].accept()
    assert isinstance(ours, trio.SocketStream)
    try:
        yield ours, peer
    finally:
        peer.close()
        await ours.aclose()
        await listeners[0].aclose()


def count_reads(monkeypatch: pytest.MonkeyPatch, fd: int, fail_first: int = 0) -> list[Any]:
    """Wrap `os.read` as `listening` calls it: each read of `fd` is noted (what it gave, or
    the error), the first `fail_first` of them failing with EAGAIN as a spurious wake-up's."""
    seen: list[Any] = []
    real: Callable[[int, int], bytes] = os.read

    def read(file: int, size: int) -> bytes:
        if file != fd:
            return real(file, size)
        if len(seen) < fail_first:
            seen.append("EAGAIN")
            raise BlockingIOError(errno.EAGAIN, "nothing to read")
        try:
            got = real(file, size)
        except OSError as exc:
            seen.append(exc)
            raise
        seen.append(got)
        return got

    monkeypatch.setattr(listening.os, "read", read)
    return seen


async def test_a_read_waits_for_its_bytes_and_asks_the_socket_once(
    pair: tuple[trio.SocketStream, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, peer = pair
    seen = count_reads(monkeypatch, ours.socket.fileno())
    got: list[bytes] = []
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                got.append(await receive_when_readable(ours, 65536))

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert seen == []  # waiting, not asking
            peer.sendall(b"POST /mcp HTTP/1.1\r\n")
    assert got == [b"POST /mcp HTTP/1.1\r\n"]
    assert seen == got  # one read, and it had bytes


async def test_bytes_that_came_already_are_read_at_once(
    pair: tuple[trio.SocketStream, socket.socket],
) -> None:
    ours, peer = pair
    peer.sendall(b"abc")
    with trio.fail_after(WAIT_S):
        got = b""
        while len(got) < 3:
            got += await receive_when_readable(ours, 2)  # at most max_bytes a read
    assert got == b"abc"


async def test_a_wake_up_with_nothing_to_read_waits_again(
    pair: tuple[trio.SocketStream, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, peer = pair
    seen = count_reads(monkeypatch, ours.socket.fileno(), fail_first=1)
    peer.sendall(b"x")
    with trio.fail_after(WAIT_S):
        assert await receive_when_readable(ours, 10) == b"x"
    assert seen == ["EAGAIN", b"x"]


async def test_the_peer_s_end_reads_as_no_bytes(
    pair: tuple[trio.SocketStream, socket.socket],
) -> None:
    ours, peer = pair
    peer.sendall(b"last")
    peer.shutdown(socket.SHUT_WR)
    with trio.fail_after(WAIT_S):
        assert await receive_when_readable(ours, 100) == b"last"
        assert await receive_when_readable(ours, 100) == b""


async def test_a_reset_is_a_broken_resource_as_trio_says_it(
    pair: tuple[trio.SocketStream, socket.socket],
) -> None:
    ours, peer = pair
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # with linger 0: a reset
    with trio.fail_after(WAIT_S), pytest.raises(trio.BrokenResourceError):
        await receive_when_readable(ours, 100)


async def test_a_socket_closed_while_the_read_waits_ends_it_closed(
    pair: tuple[trio.SocketStream, socket.socket],
) -> None:
    ours, _peer = pair
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await receive_when_readable(ours, 100)

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            await ours.aclose()
        with pytest.raises(trio.ClosedResourceError):  # and a read after the close
            await receive_when_readable(ours, 100)


async def test_a_cancelled_read_loses_no_bytes(
    pair: tuple[trio.SocketStream, socket.socket],
) -> None:
    ours, peer = pair
    with trio.move_on_after(0.05) as scope:
        await receive_when_readable(ours, 100)
    assert scope.cancelled_caught
    peer.sendall(b"kept")
    with trio.fail_after(WAIT_S):
        assert await receive_when_readable(ours, 100) == b"kept"


async def test_a_read_that_could_go_at_once_still_lets_others_run(
    pair: tuple[trio.SocketStream, socket.socket],
) -> None:
    """A checkpoint, as trio's `receive_some` is: cancellable even with bytes waiting."""
    ours, peer = pair
    peer.sendall(b"waiting")
    with trio.CancelScope() as scope:
        scope.cancel()
        await receive_when_readable(ours, 100)
    assert scope.cancelled_caught
    with trio.fail_after(WAIT_S):
        assert await receive_when_readable(ours, 100) == b"waiting"


async def test_any_other_stream_is_read_by_its_own_receive_some() -> None:
    left, right = trio.testing.memory_stream_pair()
    await left.send_all(b"memory")
    with trio.fail_after(WAIT_S):
        assert await receive_when_readable(right, 100) == b"memory"
