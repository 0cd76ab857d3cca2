"""The directory: which instance holds which home's uplink. Claims, releases and epochs run on
both implementations; takeovers, presence tied to the connection, leases and a second process
with the same instance id on PostgreSQL, with each instance a `PgDirectory` of its own (its
own pool and presence connection), as separate processes would have."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import psycopg
import pytest
import trio

from ftwbridge.store import StoreError
from ftwbridge.store.directory import Directory, Holder, LocalDirectory, OnLost
from ftwbridge.store.events import Event, Events
from ftwbridge.store.pg_directory import PgDirectory
from ftwbridge.store.postgres import PgStore

NOW_MS = 1_790_000_000_000
LEASE_S = 1.0
"""The lease of an instance whose lease a test lets run out (seconds of the database's
clock, which no test can move: those tests wait it out)."""
RENEW_S = 0.05
"""How often an instance that reports lost homes renews in these tests, seconds."""


class Clock:
    """A wall clock a test moves by hand (ms since the epoch)."""

    def __init__(self) -> None:
        self.now_ms = NOW_MS

    def __call__(self) -> int:
        return self.now_ms


@asynccontextmanager
async def instance(
    url: str,
    name: str,
    clock: Callable[[], int],
    on_lost: OnLost | None = None,
    lease_s: float = 10,
) -> AsyncIterator[PgDirectory]:
    """A present instance `name` (its directory served until the block ends) whose own wall
    clock is `clock`. Its own renewals come every `RENEW_S` seconds with `on_lost`, else
    never: the test calls `renew`."""
    store = PgStore(url, connections=2)
    await store.start()
    directory = PgDirectory(
        store,
        instance_id=name,
        url=f"http://{name}.internal:8790",
        wall_ms=clock,
        lease_s=lease_s,
        renew_s=RENEW_S if on_lost else 10**6,
    )

    async def ignore(home: str) -> None:
        raise AssertionError(f"{name} lost {home} in a test that renews by hand")

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(directory.serve, on_lost or ignore)
            yield directory
            nursery.cancel_scope.cancel()
    finally:
        store.close()


@pytest.fixture(params=["local", "postgres"])
async def directory(request: pytest.FixtureRequest) -> AsyncIterator[Directory]:
    if request.param == "local":
        yield LocalDirectory()
        return
    async with instance(request.getfixturevalue("pg_url"), "a", Clock()) as made:
        yield made


async def test_claims_take_ever_greater_epochs(directory: Directory) -> None:
    me = directory.instance_id
    assert await directory.holder("h1") is None
    assert await directory.claim("h1") == 1
    assert (await directory.holder("h1")) in (
        Holder(me, 1, ""),
        Holder(me, 1, f"http://{me}.internal:8790"),
    )
    assert await directory.claim("h1") == 2  # the box dialed again before the old uplink ended
    assert not await directory.release("h1", 1)  # the old uplink's end leaves the new one
    assert (await directory.holder("h1")) is not None
    assert await directory.release("h1", 2)
    assert await directory.holder("h1") is None
    assert await directory.claim("h1") == 3  # never back to 1: a stale epoch stays stale
    assert await directory.claim("h2") == 1


async def test_a_takeover_is_seen_by_everyone(pg_url: str) -> None:
    clock = Clock()
    async with instance(pg_url, "a", clock) as a, instance(pg_url, "b", clock) as b:
        assert await a.claim("h1") == 1
        assert await b.holder("h1") == Holder("a", 1, "http://a.internal:8790")
        assert await b.claim("h1") == 2  # the box redialed through b
        assert await a.holder("h1") == Holder("b", 2, "http://b.internal:8790")
        assert not await a.release("h1", 1)  # a's old uplink ends: b keeps the home
        assert await a.holder("h1") == Holder("b", 2, "http://b.internal:8790")
        await a.claim("h2")
        await b.claim("h2")
        assert sorted(await a.renew()) == ["h2"]  # h1 was already released by a
        assert await a.renew() == []  # said once


async def test_the_old_holder_hears_of_a_takeover_by_itself(pg_url: str) -> None:
    clock, heard = Clock(), trio.Event()
    lost: list[str] = []

    async def on_lost(home: str) -> None:  # the door would close its uplink here (4409)
        lost.append(home)
        heard.set()

    async with instance(pg_url, "a", clock, on_lost) as a, instance(pg_url, "b", clock) as b:
        await a.claim("h1")
        await a.claim("h2")
        await b.claim("h1")
        with trio.fail_after(10):
            await heard.wait()
        assert lost == ["h1"]
        assert await b.holder("h2") == Holder("a", 1, "http://a.internal:8790")


async def test_a_dead_process_drops_out_at_once_and_a_silent_one_with_its_lease(
    pg_url: str,
) -> None:
    clock = Clock()
    async with instance(pg_url, "b", clock) as b:
        async with instance(pg_url, "a", clock, lease_s=LEASE_S) as a:
            await a.claim("h1")
            presence = a._presence
            assert presence is not None
            pid = presence.info.backend_pid
            with psycopg.connect(pg_url, autocommit=True) as admin:  # as when `kill -9` ends it
                admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
            assert await b.holder("h1") is None  # no lease has run out: presence alone
            await a.renew()  # a is alive after all: it makes its presence again
            assert await b.holder("h1") == Holder("a", 1, "http://a.internal:8790")
            # a stops renewing (a host that hangs, its socket open): its lease runs out on
            # the database's clock, whatever the instances' clocks say
            await trio.sleep(LEASE_S + 0.2)
            assert await b.holder("h1") is None
            await a.renew()
            assert (await b.holder("h1")) is not None
        assert await b.holder("h1") is None  # a stopped: it left at once


async def test_a_skewed_instance_clock_misroutes_no_home(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Leases are written and compared on the database's clock: an instance whose clock is
    ahead of the holder's by more than a lease still finds the holder, and one behind does
    not keep a stopped holder present. The skewed instance says so in its log."""

    def right() -> int:
        return time.time_ns() // 1_000_000

    def ahead() -> int:
        return right() + 60_000

    def behind() -> int:
        return right() - 60_000

    async with (
        instance(pg_url, "a", right, lease_s=LEASE_S) as a,
        instance(pg_url, "b", ahead) as b,
        instance(pg_url, "c", behind) as c,
    ):
        await a.claim("h1")
        for other in (b, c):
            assert await other.holder("h1") == Holder("a", 1, "http://a.internal:8790")
        await trio.sleep(LEASE_S + 0.2)  # a stops renewing: gone for every instance
        assert await b.holder("h1") is None and await c.holder("h1") is None
        await a.renew()
        assert await b.holder("h1") == Holder("a", 1, "http://a.internal:8790")
        with caplog.at_level("WARNING", logger="ftwbridge.store"):
            await b.renew()
            await b.renew()  # said once
    (said,) = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert said.startswith("directory: this instance's clock is 60.0 s ahead of the database's")


async def test_an_instance_id_in_use_is_refused_and_a_restart_frees_old_claims(
    pg_url: str,
) -> None:
    clock = Clock()
    async with instance(pg_url, "a", clock) as a:
        await a.claim("h1")
        in_use = pytest.RaisesExc(StoreError, match="instance_id 'a' is in use by another running")
        with pytest.RaisesGroup(in_use):
            async with instance(pg_url, "a", clock):
                pass
        assert await a.holder("h1") == Holder("a", 1, "http://a.internal:8790")
    async with instance(pg_url, "a", clock) as again:  # the same id, restarted
        assert await again.holder("h1") is None  # its earlier uplinks are gone with it
        assert await again.claim("h1") == 2


async def test_a_takeover_event_is_heard_by_the_old_holder_at_once(pg_url: str) -> None:
    clock = Clock()
    store = PgStore(pg_url, connections=2)
    await store.start()
    heard: trio.MemorySendChannel[Event]
    heard, events = trio.open_memory_channel[Event](10)

    async def gap() -> None:
        raise AssertionError("no gap in this test")

    try:
        async with (
            instance(pg_url, "a", clock) as a,
            instance(pg_url, "b", clock) as b,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(Events(store).serve, heard.send, gap)
            await a.claim("h1")
            await a.claim("h2")
            with trio.fail_after(10):  # a's own claims: nothing lost
                for _ in range(2):
                    assert a.hear(await events.receive()) is None
            await b.claim("h1")
            with trio.fail_after(10):
                assert a.hear(await events.receive()) == "h1"  # before any renewal
            assert await a.renew() == []  # said once: the renewal finds nothing more
            assert a.hear(Event("takeover", "h2", {"epoch": 1, "instance": "b"})) is None  # stale
            assert a.hear(Event("roster", "h2", {"seq": 9})) is None
            nursery.cancel_scope.cancel()
    finally:
        store.close()
