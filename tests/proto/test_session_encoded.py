"""A message encoded once and sealed on each session (`AgentSession.notify_encoded`, the
opening's `hello`) is the same transport message `notify` would have sent."""

from __future__ import annotations

import pytest

from ftwbridge.pool.opening import HELLO, HELLO_BODY
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import LocalProtocolError
from ftwbridge.proto.noise import TransportKeys
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.session import AgentSession, State

KEYS = TransportKeys(b"s" * 32, b"r" * 32, b"h" * 32)


def test_hello_encoded_once_is_the_same_message() -> None:
    assert Envelope(Msg.HELLO, None, HELLO_BODY).encode() == HELLO
    one, two = AgentSession(KEYS), AgentSession(KEYS)
    for _ in range(2):  # the same seq each time, on each side
        assert one.notify_encoded(HELLO) == two.notify(Msg.HELLO, HELLO_BODY)


def test_notify_encoded_needs_an_open_session() -> None:
    session = AgentSession(KEYS)
    session.state = State.CLOSED  # the box terminated it
    with pytest.raises(LocalProtocolError):
        session.notify_encoded(HELLO)
