"""The door over a real WebSocket: authentication, close codes, rosters (PROTOCOL.md part C)."""

from __future__ import annotations

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from ftwbridge.proto.door import (
    CLOSE_BAD_MESSAGE,
    CLOSE_BAD_SIGNATURE,
    CLOSE_UNKNOWN_HOME,
    door_signature,
)
from ftwbridge.proto.envelope import Envelope, decode_envelope
from ftwbridge.proto.registry import Msg
from stubbox.owner import Owner

from .env import REAL_WAIT_S, Env


async def closed_with(env: Env, *messages: bytes | str) -> int | None:
    async with open_websocket_url(env.door_url) as ws:
        challenge = decode_envelope(await ws.get_message())  # type: ignore[arg-type]
        assert challenge.t == "door.challenge" and len(challenge.b["nonce"]) == 16
        try:
            for m in messages:
                await ws.send_message(m)
            with trio.fail_after(REAL_WAIT_S):
                while True:
                    await ws.get_message()
        except ConnectionClosed as exc:
            return exc.reason.code
    return None


def hello(owner: Owner, nonce: bytes, home: str | None = None) -> bytes:
    sig = door_signature(owner.signing_key, nonce, owner.home)
    return Envelope(
        Msg.DOOR_HELLO, None, {"home": home or owner.home, "build": "t", "sig": sig}
    ).encode()


# trio-websocket leaves its client socket to the garbage collector when the server closes the
# connection during its handshake read; that ResourceWarning is the client library's, not ours.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_close_codes(env: Env) -> None:
    owner = Owner("d1", seed="d1")
    await env.bridge.store.enroll_home("d1", owner.home_public_key)
    assert await closed_with(env, "text frame") == CLOSE_BAD_MESSAGE
    assert await closed_with(env, b"\xff\x00") == CLOSE_BAD_MESSAGE
    # over 64 KiB: the WebSocket layer closes it 1009 (message too big, RFC 6455 section 7.4.1)
    # before the door reads it, authenticated or not: a stranger cannot make us buffer more
    assert await closed_with(env, b"\x00" * (70 * 1024)) == 1009
    assert await closed_with(env, hello(owner, b"\x00" * 16, home="nobody")) == CLOSE_UNKNOWN_HOME
    assert await closed_with(env, hello(owner, b"\x00" * 16)) == CLOSE_BAD_SIGNATURE  # wrong nonce


async def test_rosters_answered_and_reconnects_not_counted(env: Env) -> None:
    owner = Owner("d2", seed="d2")
    await env.bridge.store.enroll_home("d2", owner.home_public_key)
    for _ in range(2):  # a box reconnecting sends the same roster again
        async with open_websocket_url(env.door_url) as ws:
            challenge = decode_envelope(await ws.get_message())  # type: ignore[arg-type]
            await ws.send_message(hello(owner, challenge.b["nonce"]))
            await ws.send_message(Envelope(Msg.ROSTER, None, {"roster": owner.signed}).encode())
            reply = decode_envelope(await ws.get_message())  # type: ignore[arg-type]
            assert (reply.t, reply.b) == ("roster.ok", {"seq": 1})
            await ws.send_message(Envelope(Msg.ROSTER, None, {"roster": "x"}).encode())
            reply = decode_envelope(await ws.get_message())  # type: ignore[arg-type]
            assert (reply.t, reply.b) == ("roster.refused", {"seq": 1, "code": "malformed"})
    assert env.bridge.door.stats.rosters_refused == 2  # the two malformed ones only
