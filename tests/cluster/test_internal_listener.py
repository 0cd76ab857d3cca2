"""The internal listener (`mesh/listener.py`) on real loopback sockets and raw bytes, with routes
of its own here (the forwarded-call route's signature check is the real one): garbage, an
oversize head or body, a wrong path, an unsigned forward, pipelined requests, a sender that
hangs up mid-stream (the stream's task ends, none left open), the connection limit, and TLS.
Its timing (a slow head or body, an idle connection) runs on trio's MockClock over memory
streams. Every real wait is bounded (`BOUND_S`)."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.mcp.http import HttpResponse, Write
from ftwbridge.mesh import signing
from ftwbridge.mesh.calls import ForwardedCalls
from ftwbridge.mesh.listener import InternalListener, InternalSettings, serve_internal
from ftwbridge.mesh.wire import MAX_HEAD_BYTES, Request

BOUND_S = 20.0
"""Bound on every test's waits, seconds (a loaded machine is slow, never this slow)."""
SETTINGS = InternalSettings(max_body_bytes=1000, body_s=5.0, idle_s=7.0, write_s=5.0, head_s=3.0)


class Rig:
    """A listener on 127.0.0.1 with an echo route at `/echo`, a stream at `/stream`, the real
    forwarded-call route at `/mcp` (whose service must never be reached here), and its
    faults counted."""

    def __init__(self, settings: InternalSettings = SETTINGS) -> None:
        self.faults: list[str] = []
        self.stream_ended = trio.Event()
        self.stream_started = trio.Event()
        calls = ForwardedCalls(
            service=_Unreached(),  # type: ignore[arg-type]
            checker=signing.Checker(bytes(32), "b-1"),
            wall_ms=lambda: 1_800_000_000_000,
        )
        self.listener = InternalListener(
            {"/echo": self.echo, "/stream": self.stream, "/mcp": calls},
            settings,
            on_fault=self.faults.append,
        )
        self.port = 0

    async def echo(self, request: Request, peer: str) -> HttpResponse:
        return HttpResponse(200, {"content-type": "text/plain"}, b"echo:" + request.body)

    async def stream(self, request: Request, peer: str) -> HttpResponse:
        async def body(write: Write) -> None:
            try:
                await write(b"data: one\n\n")
                self.stream_started.set()
                await trio.sleep_forever()
            finally:
                self.stream_ended.set()

        return HttpResponse(200, {"content-type": "text/event-stream"}, stream=body)


class _Unreached:
    async def handle(self, request: Any) -> HttpResponse:
        raise AssertionError("an unsigned request reached the service")


@pytest.fixture
async def rig(nursery: trio.Nursery) -> AsyncIterator[Rig]:
    made = Rig()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    made.port = sock.getsockname()[1]
    await nursery.start(serve_internal, made.listener, sock)
    yield made


def _exchange(port: int, data: bytes, *, close_after: bool = True) -> bytes:
    """Send `data` raw; everything answered until the listener closes (or `BOUND_S`)."""
    from tests.edge.live import read_until_closed

    with socket.create_connection(("127.0.0.1", port), timeout=BOUND_S) as sock:
        sock.sendall(data)
        return read_until_closed(sock, BOUND_S)


async def _raw(port: int, data: bytes) -> bytes:
    return await trio.to_thread.run_sync(_exchange, port, data)


def _words(answer: bytes) -> Any:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


def _post(path: str, body: bytes, *extra: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nhost: b1\r\ncontent-length: %d\r\n" % (path.encode(), len(body))
    return head + b"".join(extra) + b"\r\n" + body


async def test_garbage_is_400_in_words_and_only_that_connection_ends(rig: Rig) -> None:
    with trio.fail_after(BOUND_S):
        answer = await _raw(rig.port, b"\x00\x01 not http at all\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert "malformed" in _words(answer)["error"]
        assert rig.faults == ["http"]
        smuggled = b"POST /echo HTTP/1.1\r\nhost: b\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        assert (await _raw(rig.port, smuggled)).startswith(b"HTTP/1.1 400 ")
        # the listener serves on
        ok = await _raw(rig.port, _post("/echo", b"hi", b"connection: close\r\n"))
        assert ok.startswith(b"HTTP/1.1 200 ") and ok.endswith(b"echo:hi")


async def test_an_oversize_head_is_431_and_an_oversize_body_413(rig: Rig) -> None:
    with trio.fail_after(BOUND_S):
        big = b"POST /echo HTTP/1.1\r\nhost: b\r\nx-big: " + b"a" * (MAX_HEAD_BYTES + 10)
        answer = await _raw(rig.port, big)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:60]
        assert str(MAX_HEAD_BYTES) in _words(answer)["error"]
        answer = await _raw(rig.port, _post("/echo", b"x" * 1001))
        assert answer.startswith(b"HTTP/1.1 413 ") and b"connection: close" in answer
        assert _words(answer) == {"error": "Request body too large"}
        answer = await _raw(rig.port, _post("/mcp", b"x" * 1001))
        assert _words(answer)["error"]["message"] == "Request body too large"  # JSON-RPC's form


async def test_a_wrong_path_is_404_and_an_unsigned_forward_403_in_words(rig: Rig) -> None:
    with trio.fail_after(BOUND_S):
        answer = await _raw(
            rig.port, b"GET /admin HTTP/1.1\r\nhost: b\r\nconnection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 404 ")
        assert _words(answer)["error"].startswith("Nothing at /admin: this listener serves only")
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
        answer = await _raw(rig.port, _post("/mcp", body, b"connection: close\r\n"))
        assert answer.startswith(b"HTTP/1.1 403 ")
        message = _words(answer)["error"]["message"]
        assert message.startswith("Forwarded request refused: "), message
        assert rig.faults == []


async def test_pipelined_requests_are_answered_in_order_on_one_connection(rig: Rig) -> None:
    data = (
        _post("/echo", b"1")
        + _post("/echo", b"22")
        + _post("/echo", b"3", b"connection: close\r\n")
    )
    with trio.fail_after(BOUND_S):
        answer = await _raw(rig.port, data)
    assert answer.count(b"HTTP/1.1 200 ") == 3
    assert answer.index(b"echo:1") < answer.index(b"echo:22") < answer.index(b"echo:3")


async def test_a_sender_hanging_up_mid_stream_ends_the_stream(rig: Rig) -> None:
    with trio.fail_after(BOUND_S):
        stream = await trio.open_tcp_stream("127.0.0.1", rig.port)
        await stream.send_all(_post("/stream", b""))
        got = b""
        while b"data: one" not in got:
            got += await stream.receive_some(65536)
        assert b"transfer-encoding: chunked" in got.lower()
        await rig.stream_started.wait()
        await stream.aclose()
        await rig.stream_ended.wait()  # cancelled, its `finally` run
        await trio.testing.wait_all_tasks_blocked(0.05)
        assert rig.listener.open == 0  # the connection's task has ended too


async def test_past_its_connections_a_new_one_is_503_in_words(nursery: trio.Nursery) -> None:
    made = Rig(InternalSettings(1000, 5.0, 7.0, 5.0, 3.0, max_connections=1))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    await nursery.start(serve_internal, made.listener, sock)
    port = sock.getsockname()[1]
    with trio.fail_after(BOUND_S):
        first = await trio.open_tcp_stream("127.0.0.1", port)
        await first.send_all(_post("/echo", b"a"))
        assert b"echo:a" in await first.receive_some(65536)  # held open, kept alive
        answer = await _raw(port, _post("/echo", b"b"))
        assert answer.startswith(b"HTTP/1.1 503 ") and "connections" in _words(answer)["error"]
        await first.aclose()


@pytest.mark.parametrize(
    ("data", "after_s", "answer"),
    [
        (b"", 3.0, b""),  # nothing at all: closed at head_s, without a word
        (b"POST /echo HTTP/1.1\r\nhost: b", 3.0, b"HTTP/1.1 408 "),
        (_post("/echo", b"12345")[:-3], 5.0, b"HTTP/1.1 408 "),
        (_post("/echo", b"12"), 0.0, b"HTTP/1.1 200 "),  # answered at once, then idle_s
    ],
)
async def test_each_wait_has_its_bound(
    autojump_clock: trio.abc.Clock, data: bytes, after_s: float, answer: bytes
) -> None:
    listener = Rig().listener
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.handle, server)
        start = trio.current_time()
        await client.send_all(data)
        got = await client.receive_some(65536)  # the answer, or b"": closed
        assert trio.current_time() - start == pytest.approx(after_s)
        assert got.startswith(answer)
        if answer.startswith(b"HTTP/1.1 200"):  # kept alive, then closed when idle
            assert await client.receive_some(65536) == b""
            assert trio.current_time() - start == pytest.approx(SETTINGS.idle_s)


async def test_tls_is_served_and_plain_http_to_it_is_not(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    from cluster.ca import ClusterCA
    from ftwbridge.mesh.tls import client_context, server_context

    ca = ClusterCA(tmp_path)
    leaf = ca.leaf("b1")
    made = Rig()
    made.listener.tls = server_context(leaf.certfile, leaf.keyfile)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    await nursery.start(serve_internal, made.listener, sock)
    port = sock.getsockname()[1]
    with trio.fail_after(BOUND_S):
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        tls = trio.SSLStream(tcp, client_context(ca.cafile), server_hostname="127.0.0.1")
        await tls.send_all(_post("/echo", b"over tls", b"connection: close\r\n"))
        got = b""
        with pytest.raises(trio.BrokenResourceError):  # no close_notify: the socket closes
            while chunk := await tls.receive_some(65536):
                got += chunk
        await trio.aclose_forcefully(tls)
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"echo:over tls")
        plain = await _raw(port, _post("/echo", b"clear"))
        assert b"echo" not in plain and not plain.startswith(b"HTTP/1.1 200")
    assert isinstance(made.listener.tls, ssl.SSLContext)


async def test_strangers_from_one_address_cannot_keep_another_out(rig: Rig) -> None:
    """256 connections from one address that send nothing hold its share of the strangers'
    slots; its next is told 429 in words at once and closed, and another address's request
    is answered."""
    from ftwbridge.edgerules import STRANGERS_PER_SOURCE

    with trio.fail_after(BOUND_S):
        idle = []
        try:
            for _ in range(STRANGERS_PER_SOURCE):
                idle.append(await trio.open_tcp_stream("127.0.0.1", rig.port))
            await trio.testing.wait_all_tasks_blocked(0.05)  # each accepted by the listener
            assert len(rig.listener.strangers.share) == STRANGERS_PER_SOURCE
            one_more = await trio.open_tcp_stream("127.0.0.1", rig.port)
            async with one_more:
                told = b""
                while chunk := await one_more.receive_some(65536):
                    told += chunk
            assert told.startswith(b"HTTP/1.1 429 ") and b"\r\nretry-after: 5\r\n" in told
            assert "this address" in _words(told)["error"].lower()
            assert rig.listener.connections.turned_away["refused"] == 1
            other = await trio.open_tcp_stream("127.0.0.1", rig.port, local_address="127.0.0.2")
            async with other:
                await other.send_all(_post("/echo", b"in", b"connection: close\r\n"))
                got = b""
                while chunk := await other.receive_some(65536):
                    got += chunk
            assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"echo:in")
        finally:
            for stream in idle:
                await trio.aclose_forcefully(stream)


async def test_a_refusal_ends_the_connection_so_no_stranger_keeps_one(
    autojump_clock: trio.abc.Clock,
) -> None:
    listener = Rig().listener
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener.handle, server)
        await client.send_all(b"GET /nowhere HTTP/1.1\r\nHost: b-1\r\n\r\n")
        got = b""
        while chunk := await client.receive_some(65536):  # the 404, then the close
            got += chunk
        assert got.startswith(b"HTTP/1.1 404 ") and b"connection: close" in got.lower()
    assert listener.open == 0


async def test_a_peer_that_reads_no_answer_is_let_go_within_write_s(
    autojump_clock: trio.abc.Clock,
) -> None:
    listener = Rig().listener
    client, server = trio.testing.lockstep_stream_pair()  # a write waits for a read
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.send_all, _post("/echo", b"12"))
        await listener.handle(server)  # returns once the connection is let go
    assert trio.current_time() - start == pytest.approx(SETTINGS.write_s)
    assert listener.open == 0


async def test_past_its_connections_a_tls_client_reads_the_503_inside_tls(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Over TLS the 503 past `max_connections` comes after a handshake, where a TLS client
    can read it; once the listener's budget of such handshakes is spent, the connection is
    closed with no byte (a plain-text 503 would read as a TLS error, `OVER_LIMIT_TLS_PER_S`)."""
    from cluster.ca import ClusterCA
    from ftwbridge.mesh.listener import OVER_LIMIT_TLS_BURST
    from ftwbridge.mesh.tls import client_context, server_context

    ca = ClusterCA(tmp_path)
    leaf = ca.leaf("b1")
    made = Rig(InternalSettings(1000, 5.0, 7.0, 5.0, 3.0, max_connections=1))
    made.listener.tls = server_context(leaf.certfile, leaf.keyfile)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    await nursery.start(serve_internal, made.listener, sock)
    port = sock.getsockname()[1]

    async def tls_client() -> trio.SSLStream[trio.SocketStream]:
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        return trio.SSLStream(tcp, client_context(ca.cafile), server_hostname="127.0.0.1")

    with trio.fail_after(BOUND_S):
        first = await tls_client()
        await first.send_all(_post("/echo", b"a"))
        assert b"echo:a" in await first.receive_some(65536)  # held open, kept alive
        second = await tls_client()
        await second.send_all(_post("/echo", b"b"))
        answer = b""
        with pytest.raises(trio.BrokenResourceError):  # no close_notify: the socket closes
            while chunk := await second.receive_some(65536):
                answer += chunk
        await trio.aclose_forcefully(second)
        assert answer.startswith(b"HTTP/1.1 503 ") and "connections" in _words(answer)["error"]
        bucket = made.listener.over_limit_tls
        while bucket.try_take(trio.current_time()):
            pass  # the budget spent, as by a flood
        assert bucket.tokens(trio.current_time()) < OVER_LIMIT_TLS_BURST
        third = await tls_client()
        with pytest.raises(trio.BrokenResourceError):  # closed during the handshake
            await third.do_handshake()
        await trio.aclose_forcefully(third)
        raw = await _raw(port, b"\x16\x03\x01\x00\x05hello")  # a ClientHello's first bytes
        assert raw == b""  # no byte at all: no plain text a TLS client would misread
        assert made.listener.closed_over_limit >= 2
        await trio.aclose_forcefully(first)
