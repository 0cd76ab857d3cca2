"""Pending handshakes (keys/service.py `Handshakes`): bounded, and a caller that never comes
back (cancelled after its `begin` crossed a socket or TCP) cannot fill them for good."""

from __future__ import annotations

import pytest

from ftwbridge.keys.service import (
    MAX_PENDING_HANDSHAKES,
    PENDING_TTL_S,
    Handshakes,
    KeysError,
)
from ftwbridge.proto.noise import generate_static


def test_handshakes_abandoned_long_ago_make_room_and_recent_ones_do_not() -> None:
    pending = Handshakes()
    agent, _ = generate_static()
    _, box = generate_static()
    first, _m1 = pending.begin(agent, box, now=0.0)
    for i in range(MAX_PENDING_HANDSHAKES - 1):
        pending.begin(agent, box, now=float(i % 7))
    assert len(pending) == MAX_PENDING_HANDSHAKES
    with pytest.raises(KeysError, match="too many handshakes in progress"):
        pending.begin(agent, box, now=PENDING_TTL_S - 0.5)  # none is old enough yet
    handle, _m1 = pending.begin(agent, box, now=PENDING_TTL_S + 10)
    assert len(pending) == 1  # every one abandoned before the TTL went; the new one stays
    with pytest.raises(KeysError, match="no such handshake"):
        pending.finish(first, b"")
    pending.abort(handle)
    assert len(pending) == 0
