"""The lean connections (`mesh/lean.py`) keep trio's stream rules, found by a hostile review
(docs/performance.md, "The lean connections, reviewed"): every read and write is a
checkpoint even when the bytes are there at once (a peer that keeps them coming must not
starve the other tasks nor outrun a deadline), a close stays a close for a task woken by
it, what TLS writes during a read (an alert) is sent then, `max_bytes` below 1 is refused,
and the mesh's TLS contexts refuse renegotiation. On real loopback sockets against trio's
own TLS (`test_lean._pair`); every wait bounded (`BOUND_S`)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest
import trio
import trio.testing

from cluster.ca import ClusterCA
from ftwbridge.mesh.tls import client_context, server_context

from .test_lean import BOUND_S, _pair, _read


@pytest.mark.parametrize("tls", [True, False])
async def test_a_call_that_need_not_wait_is_still_a_checkpoint(tmp_path: Path, tls: bool) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path, tls=tls) as (lean, server):
            await server.send_all(b"ab")
            assert await lean.receive_some(1) == b"a"  # waited: the bytes were not there
            with trio.testing.assert_checkpoints():  # there already: a turn all the same
                assert await lean.receive_some(1) == b"b"
            with trio.testing.assert_checkpoints():  # the socket takes it at once
                await lean.send_all(b"c")
            assert await _read(server, 1) == b"c"


async def test_a_peer_sending_tiny_records_does_not_starve_the_others(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path) as (lean, server):
            assert isinstance(server, trio.SSLStream)
            for _ in range(200):  # 200 TLS records of one byte each, all there at once
                await server.send_all(b"x")
            await _read(lean, 1)
            await trio.testing.wait_all_tasks_blocked()
            turns = 0

            async def other() -> None:
                nonlocal turns
                while True:
                    turns += 1
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(other)
                for _ in range(199):
                    assert await lean.receive_some() == b"x"
                nursery.cancel_scope.cancel()
            assert turns >= 100  # the other task ran between the reads


async def test_a_task_woken_by_the_close_sees_it_closed(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path) as (lean, _server):
            lean.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            failed: list[BaseException] = []

            async def send() -> None:
                try:
                    await lean.send_all(b"x" * (16 << 20))  # the peer reads nothing
                except trio.ClosedResourceError as exc:
                    failed.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await trio.testing.wait_all_tasks_blocked()
                await lean.aclose()
            assert len(failed) == 1
            with pytest.raises(trio.ClosedResourceError):  # as the docstring says, not broken
                await lean.send_all(b"more")
            with pytest.raises(trio.ClosedResourceError):
                await lean.receive_some()


async def test_the_alert_for_a_forged_record_is_sent_at_once(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with _pair(tmp_path) as (lean, server):
            assert isinstance(server, trio.SSLStream)
            await server.send_all(b"ok")
            assert await _read(lean, 2) == b"ok"
            raw = server.transport_stream
            # an application-data record of TLS whose bytes no key made (its tag fails)
            await raw.send_all(b"\x17\x03\x03\x00\x20" + bytes(range(32)))
            with pytest.raises(trio.BrokenResourceError) as failed:
                await lean.receive_some()
            assert isinstance(failed.value.__cause__, ssl.SSLError)
            lean.tcp.socket.shutdown(socket.SHUT_WR)  # the end, after whatever was sent
            sent = b""
            while chunk := await raw.receive_some(65536):
                sent += chunk
            assert sent  # the alert (encrypted in TLS 1.3, so only its presence is checked)


async def test_max_bytes_below_one_is_refused_as_trio_does(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        for tls in (True, False):
            async with _pair(tmp_path / str(tls), tls=tls) as (lean, server):
                for bad in (0, -1):
                    with pytest.raises(ValueError, match="at least 1"):
                        await lean.receive_some(bad)
                await server.send_all(b"y")
                assert await lean.receive_some(None) == b"y"


def test_the_mesh_contexts_refuse_renegotiation(tmp_path: Path) -> None:
    ca = ClusterCA(tmp_path / "tls")
    leaf = ca.leaf("127.0.0.1")
    for context in (client_context(ca.cafile), server_context(leaf.certfile, leaf.keyfile)):
        assert context.options & ssl.OP_NO_RENEGOTIATION
