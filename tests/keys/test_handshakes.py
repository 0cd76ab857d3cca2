"""Pending handshakes (keys/service.py `Handshakes`): bounded, and a caller that never comes
back (cancelled after its `begin` crossed a socket or TCP) cannot fill them for good."""

from __future__ import annotations

import pytest

from ftwbridge.keys.service import (
    MAX_PENDING_HANDSHAKES,
    PENDING_PER_HOME,
    PENDING_TTL_S,
    Handshakes,
    KeysError,
)
from ftwbridge.proto.noise import generate_static


def test_handshakes_abandoned_long_ago_make_room_and_recent_ones_do_not() -> None:
    pending = Handshakes()
    agent, _ = generate_static()
    _, box = generate_static()
    homes = MAX_PENDING_HANDSHAKES // PENDING_PER_HOME * 2  # as many at each: none heavier
    first, _m1 = pending.begin(agent, box, now=0.0, home="h0")
    for i in range(1, MAX_PENDING_HANDSHAKES):
        pending.begin(agent, box, now=float(i % 7), home=f"h{i % homes}")
    assert len(pending) == MAX_PENDING_HANDSHAKES
    with pytest.raises(KeysError, match="too many handshakes in progress"):
        pending.begin(agent, box, now=PENDING_TTL_S - 0.5, home="h1")  # none is old enough
    handle, _m1 = pending.begin(agent, box, now=PENDING_TTL_S + 10, home="h1")
    assert len(pending) == 1  # every one abandoned before the TTL went; the new one stays
    with pytest.raises(KeysError, match="no such handshake"):
        pending.finish(first, b"")
    pending.abort(handle)
    assert len(pending) == 0


def test_one_homes_unfinished_handshakes_never_keep_another_home_out() -> None:
    """A box that never answers, or an owner with many agents, holds at most its share."""
    pending = Handshakes()
    agent, _ = generate_static()
    _, box = generate_static()
    for _ in range(PENDING_PER_HOME):
        pending.begin(agent, box, now=0.0, home="silent")
    with pytest.raises(KeysError, match="too many handshakes in progress"):
        pending.begin(agent, box, now=1.0, home="silent")  # its own share is spent
    pending.begin(agent, box, now=1.0, home="other")  # another home is not refused
    # every home together at the bound: the heaviest home's oldest makes room for a new home
    shedding = Handshakes()
    oldest, _m1 = shedding.begin(agent, box, now=0.0, home="heavy")
    for i in range(1, MAX_PENDING_HANDSHAKES):
        heavy = i < PENDING_PER_HOME
        shedding.begin(agent, box, now=1.0, home="heavy" if heavy else f"h{i % 64}")
    assert len(shedding) == MAX_PENDING_HANDSHAKES
    shedding.begin(agent, box, now=2.0, home="first-time")
    assert len(shedding) == MAX_PENDING_HANDSHAKES
    with pytest.raises(KeysError, match="no such handshake"):
        shedding.finish(oldest, b"")  # the heavy home's oldest was the one let go
