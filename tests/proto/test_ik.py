"""The bridge's written-out IK initiator (`proto/ik.py`, through `noise.Initiator`) against
noiseprotocol's responder (`noise.Responder`, the box's side): the same keys and hash both ways,
payloads carried, and every bad message 2 refused. The byte-exact vectors are in
`test_vectors.py`."""

from __future__ import annotations

import pytest

from ftwbridge.proto.errors import LocalProtocolError, RemoteProtocolError
from ftwbridge.proto.noise import (
    Initiator,
    Responder,
    StaticKey,
    Transport,
    generate_static,
    public_key,
    session_prologue,
)


def pair(agent: StaticKey, box: bytes) -> tuple[Initiator, Responder]:
    box_public = public_key(box)
    ini = Initiator(our_static=agent, their_static=box_public)
    res = Responder(our_static=box, prologue=session_prologue(box_public))
    return ini, res


@pytest.mark.parametrize("payloads", [(b"", b""), (b"hello", b"x" * 300)])
def test_against_noiseprotocols_responder(payloads: tuple[bytes, bytes]) -> None:
    agent = StaticKey(generate_static()[0])
    box = generate_static()[0]
    for _ in range(2):  # the second handshake uses the `ss` kept with the agent's key
        ini, res = pair(agent, box)
        m1 = ini.write_message1(payloads[0])
        their_static, got1 = res.read_message1(m1)
        assert their_static == agent.public and got1 == payloads[0]
        m2, res_keys = res.write_message2(payloads[1])
        ini_keys, got2 = ini.read_message2(m2)
        assert got2 == payloads[1]
        assert ini_keys.send_key == res_keys.recv_key and ini_keys.recv_key == res_keys.send_key
        assert ini_keys.handshake_hash == res_keys.handshake_hash
        sealed = Transport(ini_keys).seal(b"frame")
        assert Transport(res_keys).open(sealed) == b"frame"


@pytest.mark.parametrize(
    "spoil",
    [
        lambda m: m[:-1] + bytes([m[-1] ^ 1]),  # the tag
        lambda m: bytes([m[0] ^ 1]) + m[1:],  # the box's ephemeral key
        lambda m: bytes(32) + m[32:],  # a low-order point: an all-zero DH result
        lambda m: m[:40],  # too short
    ],
    ids=["tag", "ephemeral", "zero point", "short"],
)
def test_a_bad_message2_is_refused_and_ends_the_handshake(spoil: object) -> None:
    agent = StaticKey(generate_static()[0])
    ini, res = pair(agent, generate_static()[0])
    res.read_message1(ini.write_message1())
    m2, _ = res.write_message2()
    with pytest.raises(RemoteProtocolError):
        ini.read_message2(spoil(m2))  # type: ignore[operator]
    with pytest.raises(LocalProtocolError):
        ini.read_message2(m2)  # a failed handshake is not used again


def test_message1_once() -> None:
    ini, _ = pair(StaticKey(generate_static()[0]), generate_static()[0])
    ini.write_message1()
    with pytest.raises(LocalProtocolError):
        ini.write_message1()


def test_keys_of_another_size_are_refused_before_any_dh() -> None:
    """libsodium reads 32 bytes whatever it is given, so every key's size is checked first."""
    agent, box = generate_static()[0], public_key(generate_static()[0])
    for kwargs in (
        {"our_static": agent[:31], "their_static": box},
        {"our_static": agent, "their_static": box + b"\x00"},
        {"our_static": agent, "their_static": box, "our_ephemeral": bytes(31)},
    ):
        with pytest.raises(LocalProtocolError):
            Initiator(**kwargs)  # type: ignore[arg-type]
