"""The upstream vectors reproduced byte for byte, in both directions (PROTOCOL.md part A)."""

from __future__ import annotations

from typing import Any

import pytest

from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.frame import decode_frame, encode_frame
from ftwbridge.proto.noise import (
    Initiator,
    Responder,
    StaticKey,
    Transport,
    TransportKeys,
    generate_static,
    public_key,
)

H = bytes.fromhex


def _pair(
    hs: dict[str, Any], parsed: StaticKey | None = None
) -> tuple[TransportKeys, TransportKeys]:
    prologue = H(hs["prologue"])
    ini = Initiator(
        our_static=H(hs["initiatorStatic"]) if parsed is None else parsed,
        their_static=H(hs["responderStaticPublic"]),
        prologue=prologue,
        our_ephemeral=H(hs["initiatorEphemeral"]),
    )
    res = Responder(
        our_static=H(hs["responderStatic"]),
        prologue=prologue,
        our_ephemeral=H(hs["responderEphemeral"]),
    )
    m1 = ini.write_message1(H(hs["message1Payload"]))
    assert m1 == H(hs["message1"])
    their, payload = res.read_message1(m1)
    assert their == H(hs["initiatorStaticPublic"])
    assert payload == H(hs["message1Payload"])
    m2, res_keys = res.write_message2(H(hs["message2Payload"]))
    assert m2 == H(hs["message2"])
    ini_keys, payload2 = ini.read_message2(m2)
    assert payload2 == H(hs["message2Payload"])
    assert ini_keys.handshake_hash == res_keys.handshake_hash == H(hs["handshakeHash"])
    assert ini_keys.send_key == res_keys.recv_key and ini_keys.recv_key == res_keys.send_key
    return ini_keys, res_keys


def test_static_public_keys(webapp_vectors: dict[str, Any]) -> None:
    hs = webapp_vectors["handshake"]
    assert public_key(H(hs["initiatorStatic"])) == H(hs["initiatorStaticPublic"])
    assert public_key(H(hs["responderStatic"])) == H(hs["responderStaticPublic"])


def test_handshake_both_roles(webapp_vectors: dict[str, Any]) -> None:
    _pair(webapp_vectors["handshake"])


def test_handshake_with_a_key_parsed_once(webapp_vectors: dict[str, Any]) -> None:
    """A `StaticKey` (the keys part parses an agent's key once) gives the vector's bytes, and
    serves a second handshake as well as the first."""
    hs = webapp_vectors["handshake"]
    key = StaticKey(H(hs["initiatorStatic"]))
    assert key.public == H(hs["initiatorStaticPublic"])
    assert _pair(hs, key) == _pair(hs, key) == _pair(hs)


def test_a_key_parsed_once_follows_the_box_key() -> None:
    """One `StaticKey` (its `ss` result kept for the last box) against box A, B, then A
    again: each handshake completes with that box and no other."""
    agent = StaticKey(generate_static()[0])
    boxes = [generate_static()[0] for _ in range(2)]
    for box in (boxes[0], boxes[1], boxes[0], boxes[0]):
        ini = Initiator(our_static=agent, their_static=public_key(box))
        res = Responder(our_static=box)
        assert res.read_message1(ini.write_message1())[0] == agent.public
        m2, res_keys = res.write_message2()
        assert ini.read_message2(m2)[0].handshake_hash == res_keys.handshake_hash
        other = boxes[1] if box is boxes[0] else boxes[0]
        wrong = Initiator(our_static=agent, their_static=public_key(box))
        with pytest.raises(RemoteProtocolError):  # the wrong box cannot read it
            Responder(our_static=other).read_message1(wrong.write_message1())


def test_frames_both_directions(webapp_vectors: dict[str, Any]) -> None:
    for vec in webapp_vectors["frames"]:
        raw = H(vec["bytes"])
        frame = decode_frame(raw)
        assert (frame.lane, frame.flags, len(frame.payload)) == (
            vec["lane"],
            vec["flags"],
            vec["payloadLen"],
        )
        env = decode_envelope(frame.payload)
        if vec["envelopeKeys"] in (["t"], ["t", "b"], ["t", "id", "b"]):
            assert env.encode() == frame.payload
            bucket = vec["bucket"] if vec["lane"] == 0 else 512
            again = encode_frame(
                env.encode(), lane=vec["lane"], flags=vec["flags"], control_bucket=bucket
            )
            assert again == raw
        else:  # unknown keys are ignored on decode
            assert env == Envelope("plan.v2", None, {"horizonMs": 3600000})
            assert len(raw) == vec["bucket"]


def test_transport_both_directions(webapp_vectors: dict[str, Any]) -> None:
    ini_keys, res_keys = _pair(webapp_vectors["handshake"])
    frames = {f["name"]: H(f["bytes"]) for f in webapp_vectors["frames"]}
    app_tx, box_rx = Transport(ini_keys), Transport(res_keys)
    box_tx, app_rx = Transport(res_keys), Transport(ini_keys)
    for msg in webapp_vectors["transport"]:
        tx, rx = (app_tx, box_rx) if msg["from"] == "app" else (box_tx, app_rx)
        wire = tx.seal(frames[msg["frame"]])
        assert wire[:8] == msg["seq"].to_bytes(8, "big")
        assert wire == H(msg["wire"])
        assert rx.open(wire) == frames[msg["frame"]]


@pytest.mark.parametrize("role", ["initiator", "responder"])
def test_cacophony(cacophony: dict[str, Any], role: str) -> None:
    v = cacophony
    prologue = H(v["init_prologue"])
    ini = Initiator(
        our_static=H(v["init_static"]),
        their_static=H(v["init_remote_static"]),
        prologue=prologue,
        our_ephemeral=H(v["init_ephemeral"]),
    )
    res = Responder(
        our_static=H(v["resp_static"]), prologue=prologue, our_ephemeral=H(v["resp_ephemeral"])
    )
    msgs = v["messages"]
    if role == "initiator":
        assert ini.write_message1(H(msgs[0]["payload"])) == H(msgs[0]["ciphertext"])
        keys, payload = ini.read_message2(H(msgs[1]["ciphertext"]))
        assert payload == H(msgs[1]["payload"])
    else:
        _, payload = res.read_message1(H(msgs[0]["ciphertext"]))
        assert payload == H(msgs[0]["payload"])
        m2, keys = res.write_message2(H(msgs[1]["payload"]))
        assert m2 == H(msgs[1]["ciphertext"])
    assert keys.handshake_hash == H(v["handshake_hash"])
    # Cacophony's transport messages use implicit nonces and empty associated data, which
    # the explicit-`seq` transport does not: only its handshake is checked here.
