"""The mesh's lean connections (`mesh/lean.py`) on real loopback sockets, against trio's own
TLS at the other end (as a holder or a sender that is not ours would be): bytes cross whole
both ways, a TLS record held past what was read is counted, a close with or without
`close_notify` ends the stream, an untrusted certificate fails the handshake, and misuse
(two readers, a send cut midway, use after close) raises trio's errors. Every wait is
bounded (`BOUND_S`)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from cluster.ca import ClusterCA
from ftwbridge.mesh.lean import LeanStream, connect_tls, lean_tls
from ftwbridge.mesh.tls import client_context, server_context

BOUND_S = 20.0
"""Bound on every test's waits, seconds."""


@asynccontextmanager
async def _pair(
    tmp_path: Path, *, tls: bool = True
) -> AsyncIterator[tuple[LeanStream, trio.abc.Stream]]:
    """A `LeanStream` client connected to a trio server stream (TLS by trio's `SSLStream`
    with the cluster's CA, or plain TCP)."""
    ca = ClusterCA(tmp_path / "tls")
    leaf = ca.leaf("127.0.0.1")
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        accepted: list[trio.abc.Stream] = []
        ready = trio.Event()

        async def accept() -> None:
            tcp = await listener.accept()
            server: trio.abc.Stream = tcp
            if tls:
                server = trio.SSLStream(
                    tcp,
                    server_context(leaf.certfile, leaf.keyfile),
                    server_side=True,
                    https_compatible=True,
                )
                await server.do_handshake()
            accepted.append(server)
            ready.set()

        nursery.start_soon(accept)
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        context = client_context(ca.cafile) if tls else None
        lean = await connect_tls(tcp, context, "127.0.0.1")
        await ready.wait()
        try:
            yield lean, accepted[0]
        finally:
            await trio.aclose_forcefully(lean)
            await trio.aclose_forcefully(accepted[0])
            await listener.aclose()


async def _read(stream: trio.abc.Stream, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        data = await stream.receive_some(65536)
        assert data
        got += data
    return bytes(got)


@pytest.mark.parametrize("tls", [True, False])
async def test_bytes_cross_whole_both_ways(tmp_path: Path, tls: bool) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB: many records, many reads, a full send buffer
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path, tls=tls) as (lean, server):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lean.send_all, big)
                assert await _read(server, len(big)) == big
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.send_all, big)
                assert await _read(lean, len(big)) == big
            assert not lean.holds_more()
            await server.send_all(b"abcdef")  # a short read leaves the rest for the next
            assert await lean.receive_some(2) == b"ab"
            assert await _read(lean, 4) == b"cdef"


async def test_a_record_past_what_was_read_is_counted(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path) as (lean, server):
            assert isinstance(server, trio.SSLStream)
            tcp = server.transport_stream
            assert isinstance(tcp, trio.SocketStream)
            tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)  # both in one segment
            await server.send_all(b"first")
            await server.send_all(b"second")
            tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            assert await lean.receive_some() == b"first"
            assert lean.holds_more()
            assert await lean.receive_some(3) == b"sec"
            assert lean.holds_more()
            assert await lean.receive_some() == b"ond"
            assert not lean.holds_more()


@pytest.mark.parametrize("notify", [True, False])
async def test_a_close_with_or_without_close_notify_ends_the_stream(
    tmp_path: Path, notify: bool
) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path) as (lean, server):
            assert isinstance(server, trio.SSLStream)
            await server.send_all(b"last")
            if notify:
                await server.aclose()
            else:
                await server.transport_stream.aclose()
            assert await _read(lean, 4) == b"last"
            assert await lean.receive_some() == b""


async def test_the_lean_server_answers_trios_client(tmp_path: Path) -> None:
    ca = ClusterCA(tmp_path / "tls")
    leaf = ca.leaf("127.0.0.1")
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]

    async def serve() -> None:
        tcp = await listener.accept()
        lean = lean_tls(tcp, server_context(leaf.certfile, leaf.keyfile))
        await lean.do_handshake()
        await lean.send_all(await _read(lean, 5) + b"!")
        await lean.aclose()

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            tcp = await trio.open_tcp_stream("127.0.0.1", port)
            client = trio.SSLStream(
                tcp,
                client_context(ca.cafile),
                server_hostname="127.0.0.1",
                https_compatible=True,
            )
            await client.send_all(b"hello")
            assert await _read(client, 6) == b"hello!"
            assert await client.receive_some() == b""  # its close_notify
            await client.aclose()
        await listener.aclose()


async def test_a_certificate_of_another_ca_fails_the_handshake(tmp_path: Path) -> None:
    ours, theirs = ClusterCA(tmp_path / "ours"), ClusterCA(tmp_path / "theirs")
    leaf = theirs.leaf("127.0.0.1")
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]

    async def serve() -> None:
        tcp = await listener.accept()
        server = trio.SSLStream(tcp, server_context(leaf.certfile, leaf.keyfile), server_side=True)
        with pytest.raises(trio.BrokenResourceError):
            await server.do_handshake()
        await trio.aclose_forcefully(server)

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            tcp = await trio.open_tcp_stream("127.0.0.1", port)
            with pytest.raises(trio.BrokenResourceError) as failed:
                await connect_tls(tcp, client_context(ours.cafile), "127.0.0.1")
            assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError)
            assert tcp.socket.fileno() == -1  # closed
        await listener.aclose()


async def test_misuse_raises_trios_errors(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path) as (lean, _server):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lean.receive_some)
                await trio.testing.wait_all_tasks_blocked()
                with pytest.raises(trio.BusyResourceError):
                    await lean.receive_some()
                nursery.cancel_scope.cancel()
            # a send cut midway (the peer reads nothing, the buffers fill): the stream is broken
            lean.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            with trio.move_on_after(0.5) as cut:
                await lean.send_all(b"x" * (16 << 20))
            assert cut.cancelled_caught
            with pytest.raises(trio.BrokenResourceError):
                await lean.send_all(b"more")
            await lean.aclose()
            with pytest.raises(trio.ClosedResourceError):
                await lean.receive_some()
