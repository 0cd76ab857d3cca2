"""Events over LISTEN/NOTIFY: each change every instance must hear arrives once, in commit
order, from whoever made it; a change rolled back or a lease renewed sends nothing; a lost
LISTEN connection is said (`on_gap`) once it listens again, and events flow after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
import trio

from ftwbridge.store import hash_token
from ftwbridge.store.base import TokenRecord
from ftwbridge.store.events import Event, Events, parse_event
from ftwbridge.store.pg_directory import PgDirectory
from ftwbridge.store.postgres import PgStore

BOUND_S = 10.0
"""Bound on waiting for one event, seconds."""
KEY = b"a" * 32
GAP = Event("gap", "")
"""What `on_gap` puts in the test's channel."""


def test_payloads_that_are_not_events_are_refused() -> None:
    assert parse_event('{"kind": "roster", "home": "h1", "seq": 3}') == Event(
        "roster", "h1", {"seq": 3}
    )
    for bad in ("", "not json", "[]", '{"kind": "roster"}', '{"kind": "x", "home": "h"}'):
        assert parse_event(bad) is None, bad


@asynccontextmanager
async def listening(url: str) -> AsyncIterator[tuple[PgStore, trio.MemoryReceiveChannel[Event]]]:
    """A started store and the events its `Events` hears (with `GAP` for each gap)."""
    store = PgStore(url, connections=2)
    await store.start()
    send, receive = trio.open_memory_channel[Event](100)

    async def on_gap() -> None:
        await send.send(GAP)

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(Events(store).serve, send.send, on_gap)
            yield store, receive
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def _next(events: trio.MemoryReceiveChannel[Event]) -> Event:
    with trio.fail_after(BOUND_S):
        return await events.receive()


async def test_every_change_is_heard_once_and_nothing_else(pg_url: str) -> None:
    async with listening(pg_url) as (store, events):
        other = PgStore(pg_url)  # another instance, or the command line
        await other.start()
        try:
            await other.enroll_home("h1", b"k" * 32)
            assert await _next(events) == Event("enroll", "h1")
            await store.put_roster("h1", 3, b"signed")
            assert await _next(events) == Event("roster", "h1", {"seq": 3})
            record = TokenRecord("h1", "a1", KEY, ("ftw.live.read",), "http://x/mcp", "c", 9)
            for name in ("t1", "t2"):
                await store.put_token(hash_token(name), record)  # minting is no event
            assert await other.withdraw_agent_tokens("h1", KEY) == 2
            revoke = Event("revoke", "h1", {"agentKey": KEY.hex()})
            assert await _next(events) == revoke  # one for both tokens of the agent
            assert await other.drop_agent_tokens("h1", KEY) == 2
            assert await _next(events) == revoke
            directory = PgDirectory(other, instance_id="b", url="", wall_ms=lambda: 0)

            async def lost(home: str) -> None:
                raise AssertionError(home)

            async with trio.open_nursery() as nursery:
                await nursery.start(directory.serve, lost)
                assert await directory.claim("h1") == 1
                taken = Event("takeover", "h1", {"epoch": 1, "instance": "b"})
                assert await _next(events) == taken
                await directory.renew()  # a keepalive: no NOTIFY
                assert await directory.release("h1", 1)  # an uplink's end: no takeover
                nursery.cancel_scope.cancel()
            with (  # a change rolled back
                psycopg.connect(pg_url, autocommit=True) as conn,
                pytest.raises(ZeroDivisionError),
                conn.transaction(),
            ):
                conn.execute("INSERT INTO rosters VALUES ('h9', 1, '')")
                raise ZeroDivisionError
            await other.enroll_home("h2", b"k" * 32)
            assert await _next(events) == Event("enroll", "h2")  # nothing came between
        finally:
            other.close()


async def test_a_lost_listen_connection_is_a_gap_and_events_flow_after_it(pg_url: str) -> None:
    async with listening(pg_url) as (store, events):
        with psycopg.connect(pg_url, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query = 'LISTEN ftwbridge'"
            ).fetchall()
        assert ended == [(True,)]
        assert await _next(events) == GAP
        await store.enroll_home("h1", b"k" * 32)
        assert await _next(events) == Event("enroll", "h1")
