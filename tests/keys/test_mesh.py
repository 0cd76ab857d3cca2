"""The keys channel without I/O (keys/mesh.py): two `MeshChannel`s joined by hand, every byte
split every way, and the hostile cases (garbage, an oversized or truncated frame, a replayed
handshake or frame, a frame out of turn, a wrong key) each ending in one sentence."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftwbridge.keys.mesh import (
    MAX_FRAME_BYTES,
    WRONG_KEY,
    ChannelClosed,
    Established,
    Frame,
    MeshChannel,
    Message,
    Refused,
    State,
)

KEY = bytes(range(32))
OTHER = bytes(32)


def pump(a: MeshChannel, b: MeshChannel, *, step: int | None = None) -> tuple[list, list]:
    """Carry bytes both ways until neither has any to send; `step` splits them in pieces."""
    got_a: list = []
    got_b: list = []
    while True:
        out_a, out_b = a.data_to_send(), b.data_to_send()
        if not out_a and not out_b:
            return got_a, got_b
        for data, to, got in ((out_a, b, got_b), (out_b, a, got_a)):
            n = step or max(len(data), 1)
            for i in range(0, len(data), n):
                got.extend(to.receive_data(data[i : i + n]))


def opened(key_a: bytes = KEY, key_b: bytes = KEY) -> tuple[MeshChannel, MeshChannel]:
    client, server = MeshChannel(key_a, client=True), MeshChannel(key_b, client=False)
    got_c, got_s = pump(client, server)
    assert got_c == [Established()] and got_s == [Established()]
    return client, server


@pytest.mark.parametrize("step", [None, 1, 3, 7])
def test_a_handshake_and_messages_both_ways_however_the_bytes_are_cut(step: int | None) -> None:
    client, server = MeshChannel(KEY, client=True), MeshChannel(KEY, client=False)
    assert pump(client, server, step=step) == ([Established()], [Established()])
    client.send_message({"op": "has", "key": b"k" * 32})
    client.send_message({"op": "create", "home": "h1"})
    _, got = pump(client, server, step=step)
    assert got == [
        Message({"op": "has", "key": b"k" * 32}),
        Message({"op": "create", "home": "h1"}),
    ]
    server.send_message({"ok": True})
    got, _ = pump(client, server, step=step)
    assert got == [Message({"ok": True})]


def test_a_wrong_key_is_refused_in_one_sentence_on_both_sides() -> None:
    client, server = MeshChannel(OTHER, client=True), MeshChannel(KEY, client=False)
    got_c, got_s = pump(client, server)
    assert got_s == [Refused(WRONG_KEY, ours=True)]
    assert got_c == [Refused(WRONG_KEY, ours=False)]
    assert client.is_closed and server.is_closed
    with pytest.raises(ChannelClosed):
        client.send_message({"op": "has"})


def test_a_server_that_cannot_prove_the_key_is_refused_by_the_client() -> None:
    client = MeshChannel(KEY, client=True)
    client.data_to_send()
    challenge = (33).to_bytes(4, "big") + bytes([Frame.CHALLENGE]) + os.urandom(32)
    assert client.receive_data(challenge) == []  # an impostor's challenge: the client proves
    assert client.data_to_send()[4] == Frame.PROOF
    fake = (33).to_bytes(4, "big") + bytes([Frame.PROOF]) + os.urandom(32)
    assert client.receive_data(fake) == [Refused(WRONG_KEY, ours=True)]
    assert client.data_to_send()[4] == Frame.REFUSED and not client.is_open


def test_a_replayed_handshake_is_refused() -> None:
    client, server = MeshChannel(KEY, client=True), MeshChannel(KEY, client=False)
    recorded = bytearray(client.data_to_send())
    server.receive_data(recorded)
    client.receive_data(server.data_to_send())
    recorded += client.data_to_send()  # hello and proof, as a listener on the wire saw them
    fresh = MeshChannel(KEY, client=False)  # another connection: another server nonce
    assert fresh.receive_data(bytes(recorded)) == [Refused(WRONG_KEY, ours=True)]
    assert fresh.data_to_send().endswith(WRONG_KEY.encode())


def test_a_replayed_or_reordered_frame_does_not_open() -> None:
    client, server = opened()
    client.send_message({"op": "has", "key": b"1"})
    first = client.data_to_send()
    assert server.receive_data(first) == [Message({"op": "has", "key": b"1"})]
    [refused] = server.receive_data(first)
    assert isinstance(refused, Refused) and refused.ours and "did not open" in refused.sentence


def test_a_frame_from_another_connection_does_not_open() -> None:
    client_a, _server_a = opened()
    _client_b, server_b = opened()
    client_a.send_message({"op": "has"})
    [refused] = server_b.receive_data(client_a.data_to_send())
    assert isinstance(refused, Refused) and "did not open" in refused.sentence


def test_a_tampered_frame_does_not_open() -> None:
    client, server = opened()
    client.send_message({"op": "create", "home": "h1"})
    frame = bytearray(client.data_to_send())
    frame[-1] ^= 1
    [refused] = server.receive_data(bytes(frame))
    assert isinstance(refused, Refused) and "did not open" in refused.sentence


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a length of 1.2 GB
        b"\x00\x00\x00\x00",  # a frame of 0 bytes
        (MAX_FRAME_BYTES + 1).to_bytes(4, "big"),  # one byte over the cap
        b"\x00\x00\x00\x05\x04abcd",  # data before the handshake
        b"\x00\x00\x00\x05\x01abcd",  # a hello of the wrong size
        b"\x00\x00\x00\x22\x01\x09" + bytes(32),  # a hello of another version
        b"\x00\x00\x00\x01\x09",  # a type that does not exist
    ],
)
def test_garbage_before_the_handshake_is_refused_in_words(garbage: bytes) -> None:
    server = MeshChannel(KEY, client=False)
    [refused] = server.receive_data(garbage)
    assert isinstance(refused, Refused) and refused.ours and refused.sentence
    out = server.data_to_send()
    assert out[4] == Frame.REFUSED and out[5:].decode() == refused.sentence
    assert server.receive_data(b"more") == [] and server.data_to_send() == b""


def test_an_oversized_length_is_refused_before_its_body_arrives() -> None:
    server = MeshChannel(KEY, client=False)
    [refused] = server.receive_data((2**31).to_bytes(4, "big"))
    assert "outside 1 to 65536" in refused.sentence  # decided on the 4 bytes alone


def test_a_truncated_frame_waits_for_the_rest() -> None:
    client, server = MeshChannel(KEY, client=True), MeshChannel(KEY, client=False)
    hello = client.data_to_send()
    assert server.receive_data(hello[:-1]) == []  # the shell's deadline ends a peer that stops
    assert server.state is State.AWAIT_HELLO and server.data_to_send() == b""
    assert server.receive_data(hello[-1:]) == []
    assert server.state is State.AWAIT_PROOF


def test_undecodable_cbor_after_the_handshake_is_refused() -> None:
    client, server = opened()
    # sealed properly, but not CBOR: only a holder of the key could send this
    header = (1 + 3 + 16).to_bytes(4, "big") + bytes([Frame.DATA])
    assert client._send is not None
    body = client._send.encrypt(bytes(12), b"\xff\xff\xff", header)
    [refused] = server.receive_data(header + body)
    assert isinstance(refused, Refused) and "not the CBOR" in refused.sentence


def test_a_peer_sentence_is_shown_as_plain_text() -> None:
    client = MeshChannel(KEY, client=True)
    sentence = b"bad\x1b[31m news\r\n" + b"x" * 1000
    frame = (1 + len(sentence)).to_bytes(4, "big") + bytes([Frame.REFUSED]) + sentence
    [refused] = client.receive_data(frame)
    assert not refused.ours
    assert refused.sentence.startswith("bad?[31m news??") and len(refused.sentence) == 300


def test_keys_and_nonces_of_the_wrong_size_are_refused() -> None:
    with pytest.raises(ValueError):
        MeshChannel(b"short", client=True)
    with pytest.raises(ValueError):
        MeshChannel(KEY, client=True, nonce=b"1")


def test_a_message_over_the_frame_cap_is_not_sent() -> None:
    client, _server = opened()
    with pytest.raises(ValueError):
        client.send_message(b"x" * MAX_FRAME_BYTES)


@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(1, 40), max_size=8))
@settings(max_examples=300, deadline=None)
def test_no_bytes_make_the_channel_raise(data: bytes, cuts: list[int]) -> None:
    """Whatever arrives, however cut, before or after the handshake: events, never an
    exception, and once refused nothing more is read."""
    for start_open in (False, True):
        if start_open:
            _client, server = opened()
        else:
            server = MeshChannel(KEY, client=False)
        rest, events = data, []
        for n in [*cuts, len(data)]:
            events += server.receive_data(rest[:n])
            rest = rest[n:]
        refusals = [e for e in events if isinstance(e, Refused)]
        assert len(refusals) <= 1 and (not refusals or events[-1] is refusals[0])
        assert all(not isinstance(e, Message) for e in events)  # nothing forged gets through
