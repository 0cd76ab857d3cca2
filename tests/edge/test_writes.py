"""How `GuardedTCPServer` writes responses: one write for a response with a length, streams
as they come, hypercorn's refusals unchanged.

Each test serves a small ASGI app through `edge.serve` (hypercorn's trio worker with the guard), on
a real socket, and records every `send_all` of the server's side of the connection.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pytest
import trio

from ftwbridge import edge
from ftwbridge.edge import EdgeConfig

from .live import WAIT_S

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]
GET = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"
HEAD = b"HEAD /x HTTP/1.1\r\nHost: t\r\n\r\n"


class Writes:
    """Every `send_all` the server makes, in order (the client here writes with `socket`)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Writes:
    seen = Writes()
    original = trio.SocketStream.send_all

    async def send_all(self: trio.SocketStream, data: Any) -> None:
        seen.chunks.append(bytes(data))
        await original(self, data)

    monkeypatch.setattr(trio.SocketStream, "send_all", send_all)
    return seen


async def _serve(
    nursery: trio.Nursery, app: App, *, read_timeout: int | None = None, strangers: Any = None
) -> int:
    async def asgi(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await app(scope, receive, send)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    config = EdgeConfig()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.read_timeout = read_timeout
    if strangers is not None:
        config.strangers = strangers
    nursery.start_soon(edge.serve, asgi, config)
    with trio.fail_after(WAIT_S):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.02)
            else:
                await stream.aclose()
                return port


async def _exchange(
    port: int, request: bytes, until: bytes, on_chunk: Callable[[bytes], None] | None = None
) -> bytes:
    """Send `request`; return what arrives until `until` has been seen (or the server closed).
    `on_chunk` is told what has arrived so far after each chunk."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    got = b""
    async with stream:
        await stream.send_all(request)
        while until not in got:
            chunk = await stream.receive_some()
            if not chunk:
                break
            got += chunk
            if on_chunk is not None:
                on_chunk(got)
    return got


async def _answer(send: Any, body: bytes, length: bool = True) -> None:
    headers = [(b"content-type", b"text/plain")]
    if length:
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _responses(writes: Writes) -> list[bytes]:
    return [c for c in writes.chunks if not c.startswith((b"GET ", b"HEAD ", b"POST "))]


async def test_a_response_with_a_length_is_one_write(writes: Writes) -> None:
    """One write is a scheduler turn and a syscall less per answer, and an instance killed
    mid-answer leaves a whole answer or none: never a head whose body does not come, which a
    proxy in front can neither word nor send elsewhere (docs/operations.md, "Keep-alive
    behind a proxy")."""

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await _answer(send, b"hello " * 100)

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            got = await _exchange(port, GET, b"hello " * 100)
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"hello " * 100)
        nursery.cancel_scope.cancel()
    (only,) = _responses(writes)  # hypercorn alone writes head, body and an empty end
    assert only == got


async def test_a_head_request_is_one_write_with_no_body(writes: Writes) -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:  # HEAD: GET's length, no body
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            await _exchange(port, HEAD, b"\r\n\r\n")
        nursery.cancel_scope.cancel()
    (only,) = _responses(writes)
    assert only.startswith(b"HTTP/1.1 200 ") and only.endswith(b"\r\n\r\n")


async def test_a_streamed_response_sends_its_head_before_its_body(writes: Writes) -> None:
    head_seen = trio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await head_seen.wait()  # held back, the head would never arrive: the test times out
        await send({"type": "http.response.body", "body": b"late", "more_body": False})

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            got = await _exchange(
                port, GET, b"late", lambda got: head_seen.set() if b"\r\n\r\n" in got else None
            )
        nursery.cancel_scope.cancel()
    assert b"late" in got


async def test_a_refusal_by_hypercorn_is_written_as_before(writes: Writes) -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await _answer(send, b"never")

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            got = await _exchange(
                port, b"GET /x HTTP/1.1\r\nHost: t\r\nX: a\x00b\r\n\r\n", b"\r\n\r\n"
            )
        nursery.cancel_scope.cancel()
    assert got.startswith(b"HTTP/1.1 400 ")
    assert b"never" not in b"".join(writes.chunks)


async def _until_closed(port: int, request: bytes, on_chunk: Callable[[bytes], None]) -> bytes:
    """Send `request`; return everything the server sends until it closes."""
    return await _exchange(port, request, b"\x00never\x00", on_chunk)


async def test_an_app_that_fails_after_its_head_gets_words_not_a_head_without_a_body(
    writes: Writes,
) -> None:
    """The held head of an app that fails before its body is replaced by a 500: a head whose
    body never comes is what the one write exists to prevent (nothing of it is on the wire)."""

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the app fails between its head and its body")

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            got = await _until_closed(port, GET, lambda got: None)
        nursery.cancel_scope.cancel()
    assert got == edge.SERVER_ERROR
    assert not any(c.startswith(b"HTTP/1.1 200 ") for c in writes.chunks)


async def test_a_body_the_peer_breaks_after_a_held_head_gets_a_400() -> None:
    """An app that answers before it reads the body (a refusal, say) has its head held; a
    chunked body that then breaks RFC 9112 ends the connection with a 400, not that head."""
    head_held = trio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"5")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        head_held.set()
        while (await receive())["type"] == "http.request":
            pass  # the body never ends well: hypercorn closes first
        await send({"type": "http.response.body", "body": b"never"})

    post = b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(post)
                await head_held.wait()
                await stream.send_all(b"zz\r\nhello\r\n")  # a chunk size that is not hex
                got = b""
                while chunk := await stream.receive_some():
                    got += chunk
        nursery.cancel_scope.cancel()
    assert got == edge.BAD_REQUEST


async def test_body_bytes_that_look_like_a_head_go_out_as_they_come(writes: Writes) -> None:
    """Only the start of a response is read as a head: a later body chunk that looks like a
    head with a length is not held back for what follows it."""
    looks_like_a_head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    seen = trio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        length = str(5 + len(looks_like_a_head)).encode()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]}
        )
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await send({"type": "http.response.body", "body": looks_like_a_head, "more_body": True})
        await seen.wait()  # held back, the chunk would never arrive: the test times out
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            got = await _exchange(
                port,
                GET,
                looks_like_a_head,
                lambda got: seen.set() if got.endswith(looks_like_a_head) else None,
            )
        nursery.cancel_scope.cancel()
    assert got.endswith(b"first" + looks_like_a_head)


async def test_body_bytes_that_look_like_a_websocket_101_leave_the_connection_http() -> None:
    """A body chunk that reads like hypercorn's 101 to a WebSocket does not make the guard
    take the connection for a WebSocket (it used to end it with a Close frame)."""
    like_101 = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n"

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        length = str(5 + len(like_101)).encode()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]}
        )
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await send({"type": "http.response.body", "body": like_101, "more_body": False})

    close = GET.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app)
        with trio.fail_after(WAIT_S):
            got = await _until_closed(port, GET + close, lambda got: None)
        nursery.cancel_scope.cancel()
    assert got.count(b"first" + like_101) == 2
    assert got.endswith(b"first" + like_101)  # no Close frame (\x88...) after the answer


@pytest.mark.parametrize("length", [True, False])
async def test_a_peer_that_reads_nothing_is_let_go_after_the_read_timeout(length: bool) -> None:
    """A client that sends requests and never reads our answers filled its socket's buffers,
    and the shielded write waited for it for ever: its connection, socket and tasks stayed
    as long as the peer kept it open. A write that takes none of its bytes for the read
    timeout ends the connection, on the one-write path (a length) and on hypercorn's (a stream)."""
    ended = trio.Event()
    big = b"x" * (64 * 1024 * 1024)  # past what the kernel buffers on both ends

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await _answer(send, big, length=length)
        finally:
            ended.set()

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app, read_timeout=1)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(GET)  # and never reads
            with trio.fail_after(WAIT_S):
                await ended.wait()
        nursery.cancel_scope.cancel()


async def test_with_no_read_timeout_a_peer_that_reads_nothing_is_let_go_after_write_s(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The admin listener has no read timeout, and its writes were bounded by it: 20 clients
    that pipelined `/metrics` and read nothing held 20 sockets for as long as they liked (a
    probe held them past 60 s), and enough of them fill the process's file table. A write
    that takes none of its bytes for `WRITE_S` ends the connection there too."""
    from ftwbridge.edgerules import WRITE_S

    ended = trio.Event()
    big = b"x" * (64 * 1024 * 1024)  # past what the kernel buffers on both ends

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await _answer(send, big)
        finally:
            ended.set()

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app, read_timeout=None)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(GET)  # and never reads
            start = trio.current_time()
            with trio.fail_after(WRITE_S * 2):
                await ended.wait()
            assert trio.current_time() - start >= WRITE_S
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("read_timeout", [1, None])
async def test_peers_let_go_for_reading_nothing_take_no_other_connection_down(
    autojump_clock: trio.abc.Clock, read_timeout: int | None
) -> None:
    """Letting such a peer go cancels its connection's task group from the app's task, and
    hypercorn's task group let that `Cancelled` out of the connection as a bare one: it
    cancelled the listener's nursery, so the listener stopped accepting (connection refused)
    and every other connection of it ended. Three peers that pipeline requests and read
    nothing are let go; a request under way meanwhile is answered, and so is a new one."""
    from ftwbridge.edgerules import WRITE_S

    release = trio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await release.wait()
        await _answer(send, b"x" * (1024 * 1024) if scope["path"] == "/x" else b"small")

    async with trio.open_nursery() as nursery:
        port = await _serve(nursery, app, read_timeout=read_timeout)
        under_way = await trio.open_tcp_stream("127.0.0.1", port)
        await under_way.send_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        clogged = []
        for _ in range(3):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await stream.send_all(GET * 20)  # and never reads
            clogged.append(stream)
        await trio.sleep((read_timeout or WRITE_S) * 3)  # each let go by now
        for stream in clogged:
            await trio.aclose_forcefully(stream)
        release.set()
        assert (await under_way.receive_some(65536)).endswith(b"small")
        got = await _exchange(port, b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n", b"small")
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"small")
        await under_way.aclose()
        nursery.cancel_scope.cancel()
