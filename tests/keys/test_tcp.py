"""The keys service over TCP on 127.0.0.1 (keys/listen.py, keys/remote.py), and a connection's
limits on trio's MockClock over memory streams (the handshake deadline, idleness).

A hostile peer (raw bytes: garbage, a truncated frame, an oversized length, a replayed
handshake, a wrong key) is told why in one REFUSED sentence and closed; the service logs one
line and goes on serving everyone else."""

from __future__ import annotations

import logging
import socket
from functools import partial

import pytest
import trio
import trio.testing

from ftwbridge.keys import KeysService
from ftwbridge.keys.listen import (
    HANDSHAKE_S,
    IDLE_S,
    LOG_REFUSALS,
    MAX_CONNECTIONS,
    KeysListenError,
    RefusalLog,
    serve_connection,
    serve_keys_tcp,
)
from ftwbridge.keys.mesh import WRONG_KEY, Frame, MeshChannel
from ftwbridge.keys.remote import RemoteKeys
from ftwbridge.keys.service import BadHandshakeMessage, KeysError, UnknownAgentKey
from ftwbridge.proto.noise import Responder, generate_static
from tests.edge.test_accept_failures import fail_accepts

KEY = bytes(range(32))
WAIT_S = 30.0
"""Bound on a real-socket exchange on loopback (a loaded machine): a bound, not a measure."""


async def _service(nursery: trio.Nursery, service: KeysService | None = None) -> tuple[str, int]:
    address: tuple[str, int] = await nursery.start(
        serve_keys_tcp, "127.0.0.1:0", service or KeysService(None), KEY
    )
    return address


async def _raw(address: tuple[str, int], data: bytes) -> bytes:
    """Send `data` on a new connection, half-close, and read everything until the service
    closes; returns what it sent."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        with trio.fail_after(WAIT_S):
            await stream.send_all(data)
            await stream.send_eof()
            out = b""
            while chunk := await stream.receive_some(65536):
                out += chunk
    return out


def _refusal(out: bytes) -> str:
    """The sentence of the REFUSED frame that ends `out`."""
    frames = []
    while out:
        n = int.from_bytes(out[:4], "big")
        frames.append((out[4], out[5 : 4 + n]))
        out = out[4 + n :]
    kind, body = frames[-1]
    assert kind == Frame.REFUSED, frames
    return body.decode()


async def test_a_bridge_uses_the_keys_service_over_tcp(nursery: trio.Nursery) -> None:
    service = KeysService(None)
    keys = RemoteKeys([await _service(nursery, service)], KEY)
    with trio.fail_after(WAIT_S):
        key = await keys.create("h1")
        assert await keys.has(key) and await service.has(key)
        box_private, box_public = generate_static()
        handle, m1 = await keys.begin(key, box_public)
        assert keys.pending_handshakes == 1
        responder = Responder(our_static=box_private)
        assert responder.read_message1(m1)[0] == key
        m2, box_keys = responder.write_message2()
        transport = await keys.finish(handle, m2)
        assert transport.send_key == box_keys.recv_key
        assert keys.pending_handshakes == 0 and service.pending_handshakes == 0
        handle, _m1 = await keys.begin(key, box_public)
        with pytest.raises(BadHandshakeMessage):  # the kind crosses the channel
            await keys.finish(handle, b"not a message 2")
        with pytest.raises(UnknownAgentKey):
            await keys.begin(bytes(32), box_public)
        handle, _m1 = await keys.begin(key, box_public)
        await keys.abort(handle)
        assert service.pending_handshakes == 0
        assert await keys.sync("h1", frozenset({key})) == []
        assert await keys.sync("h1", frozenset()) == [key]
        assert not await keys.has(key)
    await keys.aclose()


async def test_a_wrong_mesh_key_is_refused_in_one_sentence_on_both_sides(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    address = await _service(nursery)
    keys = RemoteKeys([address], bytes(32))
    with trio.fail_after(WAIT_S), pytest.raises(KeysError) as refused:
        await keys.has(bytes(32))
    assert str(refused.value) == (
        f"the keys service at tcp://127.0.0.1:{address[1]} refused this bridge: {WRONG_KEY}"
    )
    [line] = [r.getMessage() for r in caplog.records if r.name == "ftwbridge.keys"]
    assert line.startswith("keys service refused 127.0.0.1:") and line.endswith(WRONG_KEY)
    await _still_serves(address)


async def _still_serves(address: tuple[str, int]) -> None:
    """A genuine bridge is served on a new connection."""
    keys = RemoteKeys([address], KEY)
    with trio.fail_after(WAIT_S):
        assert await keys.has(bytes(32)) is False
    await keys.aclose()


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("garbage", b"GET / HTTP/1.1\r\nHost: keys\r\n\r\n", "outside 1 to 65536"),
        ("oversized length", (2**32 - 1).to_bytes(4, "big") + b"x" * 100, "outside 1 to 65536"),
        ("data before the handshake", b"\x00\x00\x00\x03\x04ab", "out of turn"),
        ("a wrong proof", b"", WRONG_KEY),
    ],
)
async def test_hostile_bytes_end_only_their_own_connection(
    nursery: trio.Nursery, name: str, data: bytes, words: str
) -> None:
    address = await _service(nursery)
    good = RemoteKeys([address], KEY)
    with trio.fail_after(WAIT_S):
        key = await good.create("h1")  # a live connection, kept in the bridge's pool
        if name == "a wrong proof":
            hello = MeshChannel(KEY, client=True).data_to_send()
            data = hello + (33).to_bytes(4, "big") + bytes([Frame.PROOF]) + bytes(32)
        assert words in _refusal(await _raw(address, data))
        assert await good.has(key)  # the pooled connection and the service are unharmed
    await _still_serves(address)
    await good.aclose()


async def test_a_replayed_handshake_is_refused(nursery: trio.Nursery) -> None:
    address = await _service(nursery)
    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream(*address)
        channel = MeshChannel(KEY, client=True)
        recorded = channel.data_to_send()
        async with stream:
            await stream.send_all(recorded)
            channel.receive_data(await stream.receive_some(65536))
            proof = channel.data_to_send()
            recorded += proof
            await stream.send_all(proof)
            channel.receive_data(await stream.receive_some(65536))
            assert channel.is_open  # a genuine session, recorded by a listener on the wire
        assert _refusal(await _raw(address, recorded)) == WRONG_KEY


async def test_a_truncated_frame_and_a_hang_up_leave_the_service_serving(
    nursery: trio.Nursery,
) -> None:
    address = await _service(nursery)
    hello = MeshChannel(KEY, client=True).data_to_send()
    with trio.fail_after(WAIT_S):
        assert await _raw(address, hello[:10]) == b""  # cut short, then hung up: closed quietly
        with socket.create_connection(address) as s:  # reset mid-frame
            s.sendall(hello[:20])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    await _still_serves(address)


async def test_the_next_keys_service_answers_when_the_first_is_down(
    nursery: trio.Nursery,
) -> None:
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        down = s.getsockname()
    first, second = KeysService(None), KeysService(None)
    a, b = await _service(nursery, first), await _service(nursery, second)
    keys = RemoteKeys([down, b], KEY)
    with trio.fail_after(WAIT_S):
        key = await keys.create("h1")
        assert await second.has(key)
        with pytest.raises(KeysError, match=r"no keys service answers: tcp://127\.0\.0\.1:\d+"):
            await RemoteKeys([down], KEY).has(key)  # no connection was made to close
        # a handshake's finish goes where its begin went, whichever is preferred meanwhile
        both = RemoteKeys([a, b], KEY)
        first_key = await first.create("h1")
        box_private, box_public = generate_static()
        handle, m1 = await both.begin(first_key, box_public)
        responder = Responder(our_static=box_private)
        responder.read_message1(m1)
        m2, _ = responder.write_message2()
        assert (await both.finish(handle, m2)).handshake_hash
    await keys.aclose()
    await both.aclose()


async def test_a_service_that_accepts_and_stays_silent_is_passed_over(
    nursery: trio.Nursery,
) -> None:
    service = KeysService(None)
    address = await _service(nursery, service)
    with socket.socket() as silent:  # the kernel accepts; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        keys = RemoteKeys([silent.getsockname(), address], KEY)
        with trio.fail_after(WAIT_S):
            key = await keys.create("h1")  # after `CONNECT_S` at the silent one
        assert await service.has(key)
        with trio.fail_after(WAIT_S):
            assert await keys.has(key)
    await keys.aclose()


async def test_a_pooled_connection_the_service_closed_is_replaced() -> None:
    service = KeysService(None)
    async with trio.open_nursery() as nursery:
        address = await _service(nursery, service)
        keys = RemoteKeys([address], KEY)
        with trio.fail_after(WAIT_S):
            key = await keys.create("h1")
        nursery.cancel_scope.cancel()  # the keys service stops; the bridge's connection dies
    async with trio.open_nursery() as nursery:
        again: tuple[str, int] = await nursery.start(
            serve_keys_tcp, f"127.0.0.1:{address[1]}", service, KEY
        )
        assert again == address
        with trio.fail_after(WAIT_S):
            assert await keys.has(key)  # the stale connection is replaced at once, once
        await keys.aclose()
        nursery.cancel_scope.cancel()


async def test_a_port_in_use_is_refused_in_words(nursery: trio.Nursery) -> None:
    address = await _service(nursery)
    with pytest.raises(KeysListenError, match=r"cannot listen on 127\.0\.0\.1:\d+: "):
        await serve_keys_tcp(f"127.0.0.1:{address[1]}", KeysService(None), KEY)


async def test_the_handshake_deadline(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    limiter = trio.CapacityLimiter(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(serve_connection, limiter=limiter), theirs, KeysService(None), KEY
        )
        channel = MeshChannel(KEY, client=True)
        await ours.send_all(channel.data_to_send()[:-1])  # one byte short, then nothing
        start = trio.current_time()
        out = b""
        while chunk := await ours.receive_some():
            out += chunk
        assert trio.current_time() - start == pytest.approx(HANDSHAKE_S)
        assert _refusal(out) == f"the handshake took longer than {HANDSHAKE_S:g} s"
    assert limiter.borrowed_tokens == 0


async def test_an_idle_connection_is_closed(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        serve = partial(serve_connection, limiter=trio.CapacityLimiter(1))
        nursery.start_soon(serve, theirs, KeysService(None), KEY)
        channel = MeshChannel(KEY, client=True)
        while not channel.is_open:
            await ours.send_all(channel.data_to_send())
            channel.receive_data(await ours.receive_some())
        await ours.send_all(channel.data_to_send())
        start = trio.current_time()
        assert await ours.receive_some() == b""  # closed, quietly
        assert trio.current_time() - start == pytest.approx(IDLE_S)


async def test_connections_past_the_limit_are_refused_in_words(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = trio.CapacityLimiter(MAX_CONNECTIONS)
    async with trio.open_nursery() as nursery:
        for _ in range(MAX_CONNECTIONS):
            await limiter.acquire_on_behalf_of(object())  # busy connections
        ours, theirs = trio.testing.memory_stream_pair()
        nursery.start_soon(
            partial(serve_connection, limiter=limiter), theirs, KeysService(None), KEY
        )
        out = b""
        while chunk := await ours.receive_some():
            out += chunk
        assert "too many connections" in _refusal(out)


def test_refusal_lines_are_bounded_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    refusals = RefusalLog()
    said = [refusals.warn(0.5 * i, "refused %s", i) for i in range(100)]  # 50 s of a flood
    assert said == [True] * LOG_REFUSALS + [False] * (100 - LOG_REFUSALS)
    assert refusals.warn(61.0, "refused %s", "later")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:LOG_REFUSALS] == [f"refused {i}" for i in range(LOG_REFUSALS)]
    assert lines[LOG_REFUSALS:] == [
        f"keys service: {100 - LOG_REFUSALS} more refused connections were not logged",
        "refused later",
    ]


async def test_a_peer_gone_before_its_refusal_is_written_ends_quietly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = trio.CapacityLimiter(1)
    await limiter.acquire_on_behalf_of(object())
    ours, theirs = trio.testing.memory_stream_pair()
    await ours.aclose()
    await serve_connection(theirs, KeysService(None), KEY, limiter=limiter)  # raises nothing
    ours, theirs = trio.testing.memory_stream_pair()
    await ours.aclose()
    await serve_connection(theirs, KeysService(None), KEY, limiter=trio.CapacityLimiter(1))


async def test_the_keys_listener_waits_out_emfile_in_words_and_serves_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    failures = fail_accepts(monkeypatch, 3)
    async with trio.open_nursery() as nursery:
        address = await _service(nursery)
        out = await _raw(address, b"\x00\x00\x00\x01\xff")  # served once a file was free
        assert _refusal(out)
        nursery.cancel_scope.cancel()
    assert failures == [0]
    assert not [r for r in caplog.records if r.name == "trio.serve_listeners"]
    said = [r.getMessage() for r in caplog.records if r.name == "ftwbridge.listeners"]
    assert said and "the keys service on 127.0.0.1:0" in said[0] and "(EMFILE)" in said[0]
    assert "accepts connections again" in said[-1]
