"""The hop's channel (`mesh/channel.py`) against holders on real loopback sockets that answer
well, byte by byte, not at all, with garbage, or close: a pooled connection is reused and one
the holder closed idle is never used; "not reached" (nothing sent) and "lost" (sent, then
failed) are told apart exactly, since a lost forward is never sent again; TLS verifies the
cluster's CA. Every wait is bounded (`BOUND_S`)."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
import trio.testing

from cluster.ca import ClusterCA
from ftwbridge.mesh import channel
from ftwbridge.mesh.channel import HopClient, Lost, NotReached
from ftwbridge.mesh.tls import client_context, server_context

BOUND_S = 20.0
"""Bound on every test's waits, seconds (a loaded machine is slow, never this slow)."""
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
Handler = Callable[[trio.abc.Stream], Awaitable[None]]


async def _read_request(stream: trio.abc.Stream) -> bytes:
    """The bytes of one whole request (head and its content-length body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.startswith(b"content-length")
    )
    while len(body) < length:
        body += await stream.receive_some(65536)
    return data


async def _serve(nursery: trio.Nursery, handler: Handler, tls: ssl.SSLContext | None = None) -> str:
    """Start a holder whose every connection is `handler`'s (over TLS with `tls`); its URL."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    listeners: list[trio.abc.Listener[Any]] = [listener]
    if tls is not None:
        listeners = [trio.SSLListener(listener, tls, https_compatible=True)]
    await nursery.start(trio.serve_listeners, handler, listeners)
    return f"{'https' if tls else 'http'}://127.0.0.1:{port}"


async def test_an_answer_comes_back_whole_and_the_connection_is_reused() -> None:
    seen: list[bytes] = []

    async def holder(stream: trio.abc.Stream) -> None:
        while True:
            seen.append(await _read_request(stream))
            for byte in OK:  # one byte at a time: the reader is fed every split
                await stream.send_all(bytes([byte]))

    hop = HopClient(idle_s=30)
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder)
            for _ in range(3):
                answer = await hop.request(url, "POST", "/mcp", [("x-a", "1")], b"body")
                assert (answer.status, answer.body) == (200, b"{}")
                assert ("content-type", "application/json") in answer.headers
            assert hop.connections == 1
            assert seen[0].startswith(b"POST /mcp HTTP/1.1\r\n") and seen[0].endswith(b"body")
            assert b"x-a: 1\r\n" in seen[0]
            await hop.aclose()
            nursery.cancel_scope.cancel()


async def test_a_connection_the_holder_closed_idle_is_never_used() -> None:
    closed = trio.Event()

    async def holder(stream: trio.abc.Stream) -> None:
        await _read_request(stream)
        await stream.send_all(OK)
        await stream.aclose()  # keep-alive ended by the holder, as at its idle timeout
        closed.set()

    hop = HopClient(idle_s=30)
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder)
            await hop.request(url, "POST", "/mcp", [], b"")
            await closed.wait()
            await trio.sleep(0.05)  # the FIN reaches this side's socket
            answer = await hop.request(url, "POST", "/mcp", [], b"")  # not Lost: a new one
            assert answer.status == 200 and hop.connections == 2
            await hop.aclose()
            nursery.cancel_scope.cancel()


async def test_a_connection_idle_past_idle_s_is_not_reused(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def holder(stream: trio.abc.Stream) -> None:
        while True:
            await _read_request(stream)
            await stream.send_all(OK)

    hop = HopClient(idle_s=2.5)
    async with trio.open_nursery() as nursery:
        url = await _serve(nursery, holder)
        await hop.request(url, "POST", "/mcp", [], b"")
        await trio.sleep(3)
        await hop.request(url, "POST", "/mcp", [], b"")
        assert hop.connections == 2
        await hop.aclose()
        nursery.cancel_scope.cancel()


async def test_no_holder_listening_is_not_reached() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
    with trio.fail_after(BOUND_S), pytest.raises(NotReached, match="refused"):
        await HopClient(idle_s=30).request(f"http://127.0.0.1:{port}", "POST", "/mcp", [], b"")


async def test_a_header_no_request_may_carry_is_never_sent() -> None:
    async def holder(stream: trio.abc.Stream) -> None:
        raise AssertionError("never connected to")

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder)
            hop = HopClient(idle_s=30)
            for bad in [("x", "a\r\nb: c"), ("x y", "1"), ("", "1"), ("x", "\0"), ("x", "€")]:
                with pytest.raises(NotReached, match="cannot be sent"):
                    await hop.request(url, "POST", "/mcp", [("ok", "1"), bad], b"")
            assert hop.connections == 0
            nursery.cancel_scope.cancel()


async def _lost_with(answer: bytes, *, close: bool = True) -> str:
    async def holder(stream: trio.abc.Stream) -> None:
        await _read_request(stream)
        await stream.send_all(answer)
        if close:
            await stream.aclose()
        else:
            await trio.sleep_forever()

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder)
            with pytest.raises(Lost) as lost:
                await HopClient(idle_s=30).request(url, "POST", "/mcp", [], b"x")
            nursery.cancel_scope.cancel()
    return str(lost.value)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"", "closed the connection"),  # read the request, then hung up
        (b"garbage\r\n\r\n", "not HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}", "closed the connection"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "not HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\n" + b"x: " + b"y" * 70_000 + b"\r\n\r\n", "not HTTP/1.1"),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: x\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 204 No Content\r\ncontent-length: 2\r\n\r\n{}", "other than 0"),
    ],
)
async def test_a_holder_that_fails_after_the_request_went_out_is_lost(
    answer: bytes, words: str
) -> None:
    assert words in await _lost_with(answer)


async def test_an_answer_larger_than_the_bound_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channel, "ANSWER_MAX_BYTES", 10)
    big = b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n" + b"x" * 11
    assert "larger than 10 bytes" in await _lost_with(big, close=False)


async def test_a_stream_comes_piece_by_piece_and_a_silent_one_is_lost() -> None:
    more = trio.Event()

    async def holder(stream: trio.abc.Stream) -> None:
        await _read_request(stream)
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        conn.next_event()
        head = h11.Response(status_code=200, headers=[("content-type", "text/event-stream")])
        await stream.send_all(conn.send(head) + conn.send(h11.Data(data=b"one")))
        await more.wait()
        await stream.send_all(conn.send(h11.Data(data=b"two")) or b"")
        await trio.sleep_forever()  # then silence

    hop = HopClient(idle_s=30)
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder)
            got: list[bytes] = []
            with pytest.raises(Lost, match="nothing came"):
                async with hop.stream(url, "POST", "/mcp", [], b"", read_s=0.5) as answer:
                    assert answer.status == 200
                    async for piece in answer.chunks():
                        got.append(piece)
                        more.set()
            assert got == [b"one", b"two"]
            nursery.cancel_scope.cancel()


async def test_over_tls_the_cluster_ca_is_verified(tmp_path: Path) -> None:
    ca = ClusterCA(tmp_path / "tls")
    leaf = ca.leaf("b2")

    async def holder(stream: trio.abc.Stream) -> None:
        try:
            while True:
                await _read_request(stream)
                await stream.send_all(OK)
        except trio.BrokenResourceError:
            return  # a client that did not trust this certificate

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder, tls=server_context(leaf.certfile, leaf.keyfile))
            hop = HopClient(idle_s=30, tls=client_context(ca.cafile))
            for _ in range(2):
                assert (await hop.request(url, "POST", "/mcp", [], b"")).status == 200
            assert hop.connections == 1
            await hop.aclose()
            other = ClusterCA(tmp_path / "other")  # a CA this holder's certificate is not of
            with pytest.raises(NotReached):
                await HopClient(idle_s=30, tls=client_context(other.cafile)).request(
                    url, "POST", "/mcp", [], b""
                )
            with pytest.raises((NotReached, Lost)):  # plain HTTP to a TLS listener
                await HopClient(idle_s=30).request(
                    url.replace("https", "http"), "POST", "/mcp", [], b""
                )
            nursery.cancel_scope.cancel()


async def test_past_its_forwards_at_once_a_request_is_not_reached(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def holder(stream: trio.abc.Stream) -> None:
        await _read_request(stream)
        await trio.sleep_forever()  # answers nothing: the one slot stays taken

    hop = HopClient(idle_s=30, max_connections=1)
    async with trio.open_nursery() as nursery:
        url = await _serve(nursery, holder)
        nursery.start_soon(hop.request, url, "POST", "/mcp", [], b"")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(NotReached, match="under way"):
            await hop.request(url, "POST", "/mcp", [], b"")
        nursery.cancel_scope.cancel()


async def test_a_connection_is_reused_when_the_process_has_many_descriptors() -> None:
    """Past descriptor 1023 (a busy instance's uplinks and calls), the idle check still works."""

    async def holder(stream: trio.abc.Stream) -> None:
        while True:
            await _read_request(stream)
            await stream.send_all(OK)

    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(hard, 4096) < 1200:
        pytest.skip("the process may not open 1200 descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        hop = HopClient(idle_s=30)
        with trio.fail_after(BOUND_S):
            async with trio.open_nursery() as nursery:
                url = await _serve(nursery, holder)
                for _ in range(3):
                    assert (await hop.request(url, "POST", "/mcp", [], b"")).status == 200
                assert hop.connections == 1
                await hop.aclose()
                nursery.cancel_scope.cancel()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_over_tls_bytes_past_an_answer_never_answer_the_next_request(tmp_path: Path) -> None:
    """A holder that sends one answer too many, in a TLS record of its own but in the same TCP
    segment: the TLS layer has those bytes, no poll of the socket sees them, and the
    connection must not be pooled with them (the next forward would read them as its own)."""
    ca = ClusterCA(tmp_path / "tls")
    leaf = ca.leaf("b2")
    context = server_context(leaf.certfile, leaf.keyfile)
    served = 0

    async def holder(tcp: trio.SocketStream) -> None:
        nonlocal served
        served += 1
        stream = trio.SSLStream(tcp, context, server_side=True, https_compatible=True)
        with trio.move_on_after(BOUND_S):
            await _read_request(stream)
            if served == 1:  # both records in one segment: the client reads them at once
                tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                await stream.send_all(OK)
                await stream.send_all(OK.replace(b"{}", b"!!"))
                tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
                await trio.sleep_forever()
            while True:
                await stream.send_all(OK)
                await _read_request(stream)

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            (listener,) = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"), holder, 0)
            url = f"https://127.0.0.1:{listener.socket.getsockname()[1]}"
            hop = HopClient(idle_s=30, tls=client_context(ca.cafile))
            for _ in range(3):
                assert (await hop.request(url, "POST", "/mcp", [], b"")).body == b"{}"
            assert hop.connections == 2  # the first one was never used again
            await hop.aclose()
            nursery.cancel_scope.cancel()


async def test_a_stream_whose_head_never_comes_is_lost(autojump_clock: trio.abc.Clock) -> None:
    async def holder(stream: trio.abc.Stream) -> None:
        await _read_request(stream)
        await trio.sleep_forever()  # no head at all

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            url = await _serve(nursery, holder)
            with pytest.raises(Lost, match="nothing came for 5"):
                async with HopClient(idle_s=30).stream(url, "POST", "/mcp", [], b"", read_s=5):
                    pass
            nursery.cancel_scope.cancel()
