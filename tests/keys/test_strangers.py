"""Connections that have not proved the mesh key get their own, smaller quota on the keys
service (docs/operations.md, "Limits that strangers cannot fill"): a thousand idle strangers
on real sockets, from several loopback addresses, never keep a bridge out."""

from __future__ import annotations

import ipaddress

import pytest
import trio

from ftwbridge.fairshare import FairShare, SlotRefused, Slots, source_key
from ftwbridge.keys import KeysService, listen
from ftwbridge.keys.listen import MAX_CONNECTIONS, MAX_STRANGERS, serve_keys_tcp
from ftwbridge.keys.remote import RemoteKeys

KEY = bytes(range(32))
WAIT_S = 60.0
"""Bound on real-socket work on loopback (a loaded machine): a bound, not a measure."""
STRANGERS = MAX_CONNECTIONS + 76
"""Idle strangers: a thousand and more, past what the service serves at once."""
SOURCES = [f"127.0.0.{n}" for n in range(2, 12)]


def test_fair_share_sheds_the_heaviest_sources_oldest() -> None:
    share: FairShare[str] = FairShare(total=4, per_source=3)
    assert share.admit("A", "a1") == [] and share.admit("A", "a2") == []
    assert share.admit("A", "a3") == []
    assert share.admit("A", "a4") is None  # its own bound
    assert share.admit("B", "b1") == []  # full now
    assert share.admit("C", "c1") == ["a1"]  # the heaviest's oldest goes
    assert share.admit("A", "a5") is None  # A (2) is not lighter than the heaviest other
    assert share.admit("D", "d1") == ["a2"]
    assert len(share) == 4 and share.held_by("A") == 1
    share.release("A", "a1")  # shed already: nothing happens
    assert len(share) == 4
    share.release("A", "a3")
    assert share.admit("A", "a6") == [] and len(share) == 4
    with pytest.raises(ValueError):
        FairShare(total=1, per_source=2)


def test_a_source_is_an_address_or_an_ipv6_64() -> None:
    assert source_key("127.0.0.2") == "127.0.0.2"
    assert (
        source_key("2001:db8:1:2:aaaa::1") == source_key("2001:db8:1:2::9") == "2001:db8:1:2::/64"
    )
    assert source_key("::ffff:203.0.113.5") == "203.0.113.5"
    assert source_key("10.0.0.2", [ipaddress.ip_network("10.0.0.0/8")]) is None  # exempt
    assert source_key("?") == "?"


async def test_slots_cancel_what_they_shed() -> None:
    slots = Slots(total=1, per_source=1)
    with slots.hold("A") as first:
        with pytest.raises(SlotRefused), slots.hold("A"):
            pass
        with slots.hold("B"):
            assert first.cancel_called and slots.shed == 1


async def test_a_thousand_idle_strangers_never_keep_a_bridge_out(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listen, "HANDSHAKE_S", 2 * WAIT_S)  # they stay for the whole test
    service = KeysService(None)
    address: tuple[str, int] = await nursery.start(serve_keys_tcp, "127.0.0.1:0", service, KEY)
    idle: list[trio.SocketStream] = []
    try:
        with trio.fail_after(WAIT_S):
            for n in range(STRANGERS):  # connect and say nothing
                idle.append(
                    await trio.open_tcp_stream(*address, local_address=SOURCES[n % len(SOURCES)])
                )
            keys = RemoteKeys([address], KEY)  # a bridge, from 127.0.0.1
            try:
                key = await keys.create("h1")
                assert await service.has(key)
            finally:
                await keys.aclose()
        with trio.fail_after(WAIT_S):  # strangers past their share were told and closed
            out = b""
            while chunk := await idle[0].receive_some(65536):
                out += chunk
        assert b"not proved the mesh key" in out
        assert MAX_STRANGERS < STRANGERS
    finally:
        for stream in idle:
            await stream.aclose()
