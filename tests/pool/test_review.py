"""Seven defects a review of the pooled-session rework and the roster applier found; each test
failed before its fix. MockClock (autojump); real door, pool, keys part and stub box over
memory links."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.door import Door
from ftwbridge.mcp.auth import TokenCache
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.store import TokenRecord, hash_token
from stubbox.uplink import StubHome
from tests.harness import MemoryStore, Rig, wall_ms


async def _outcome(rig: Rig, key: bytes, read: Read = Read.LIVE_GET) -> Any:
    try:
        return await rig.pool.call("h1", key, read)
    except Refusal as exc:
        return exc


# -- drain ----------------------------------------------------------------------------------


@pytest.mark.config(pace_calls_burst=1, pace_calls_per_s=0.5, pace_wait_s=3)
async def test_a_call_still_queued_when_drain_ends_the_sessions_is_not_served_after(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """A call still waiting for its pacing turn when `drain` ends the sessions is refused
    `restarting`; it once opened a brand-new session and was served after the drain."""
    await rig.pool.call("h1", agent, Read.LIVE_GET)  # warm; spends the one pacing token
    results: list[Any] = []

    async def queued() -> None:
        results.append(await _outcome(rig, agent))

    async with trio.open_nursery() as inner:
        inner.start_soon(queued)  # waits 2 s for its turn
        await trio.sleep(0.1)
        await rig.pool.drain(0.5)  # the grace passes while it still waits
        assert rig.pool.statistics().sessions == 0
    assert isinstance(results[0], Refusal), "served on a session opened after drain"
    stats = rig.pool.statistics()
    assert (stats.sessions, stats.opening) == (0, 0)
    assert stub.box.session_count == 0


# -- metrics --------------------------------------------------------------------------------


class _Observer:
    def __init__(self) -> None:
        self.opens: list[str] = []

    def on_queue_wait(self, seconds: float) -> None:
        pass

    def on_open(self, outcome: str, seconds: float) -> None:
        self.opens.append(outcome)


async def test_an_opening_closed_from_outside_is_not_counted_ok(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """An opening closed from outside (its scope cancelled, no exception) is counted `closed`;
    it was once reported `ok` (a handshake success in /metrics)."""
    observer = _Observer()
    rig.pool._observer = observer
    stub.hold = True  # the opening waits for message 2

    async def caller(out: list[Any]) -> None:
        out.append(await _outcome(rig, agent))

    got: list[Any] = []
    async with trio.open_nursery() as inner:
        inner.start_soon(caller, got)
        await trio.sleep(0.5)
        await stub.drop_agent(agent)  # revoked while opening
    assert isinstance(got[0], Refusal) and got[0].code == Code.E_GRANT_REVOKED
    assert observer.opens == ["closed"], observer.opens


# -- the door's roster cache ----------------------------------------------------------------


class SnapshotStore(MemoryStore):
    """A store whose roster reads answer what was stored when they began, a second later
    (SQLite read off-thread on a busy disk)."""

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        snapshot = self.rosters.get(home)
        await trio.sleep(1)
        return snapshot


async def test_a_slow_store_read_does_not_roll_back_a_newer_roster(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    """`Door.roster` keeps the newer of what it read from the store and what `take_roster` put
    in memory during the read; it once cached the store's older one, undoing a revocation the
    box had just sent. At a bridge restart the memory is empty, so any request for the home
    races the box's first roster."""
    rig = Rig(nursery)
    rig.store = rig.door.rosters.store = SnapshotStore()
    await rig.start()
    stub = await rig.add_home()
    key, _ = await rig.grant(stub)
    with trio.fail_after(5):
        await rig.door.rosters_saved()
    rig.door.rosters._rosters.clear()  # a restarted bridge: only the store knows the roster
    nursery.start_soon(stub.drop_agent, key)  # the reader takes it (its own store look: 1 s)
    await trio.sleep(0.5)
    await rig.door.roster("h1")  # e.g. a token check at that moment: its look ends at 1.5 s
    await trio.sleep(2)
    newest = await rig.door.roster("h1")
    assert newest is not None
    assert newest.seq == stub.owner.roster.seq, (newest.seq, stub.owner.roster.seq)
    assert key not in newest.agents()
    err = await _outcome(rig, key)
    assert isinstance(err, Refusal) and err.code == Code.E_GRANT_REVOKED, err


# -- a send cancelled before it left ---------------------------------------------------------


class _SlowSendDoor(Door):
    """A door whose tunnels' sends first wait `delay_s` (the uplink's send lock held by a
    long send to a slow box) before sending."""

    delay_s = 0.0

    async def open_tun(self, home: str) -> Any:
        t = await super().open_tun(home)
        real_send = t.send

        async def send(d: bytes) -> bool:
            if type(self).delay_s:
                await trio.sleep(type(self).delay_s)
            return await real_send(d)

        t.send = send  # type: ignore[method-assign]
        return t


async def test_a_call_cancelled_before_its_request_left_does_not_hold_the_session(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    """A caller cancelled while its request waits to be sent (the uplink's lock) sent nothing,
    so the session is free at once; it was once held BUSY for `call_deadline_s` as if the box
    had the request, and the agent's next call waited all that time (`make bench` at 1
    connection fell to 20 requests a second)."""
    door_cls: type[_SlowSendDoor] = type("D", (_SlowSendDoor,), {})
    rig = Rig(nursery, door_cls=door_cls)
    await rig.start()
    stub = await rig.add_home()
    key, _ = await rig.grant(stub)
    await rig.pool.call("h1", key, Read.LIVE_GET)  # warm
    reads = stub.box.stats.reads
    door_cls.delay_s = 2.0
    with trio.move_on_after(1):
        await rig.pool.call("h1", key, Read.LIVE_GET)  # cancelled before its send happened
    door_cls.delay_s = 0.0
    assert stub.box.stats.reads == reads  # the box never saw it
    t0 = trio.current_time()
    with trio.fail_after(60):
        reply = await rig.pool.call("h1", key, Read.LOADPOINTS_GET)
    assert reply.t == "loadpoints"
    assert trio.current_time() - t0 < 5, f"waited {trio.current_time() - t0:.1f} s"
    assert rig.pool.statistics().drops == {}, rig.pool.statistics().drops


# -- the token cache --------------------------------------------------------------------------


async def test_a_token_revoked_during_its_lookup_is_not_cached(
    autojump_clock: trio.abc.Clock,
) -> None:
    """RFC 7009 revocation drops the token from the store, then empties the cache; a lookup
    that read the store before the drop and returns after the clear must not cache the revoked
    record (it once did, for `TOKEN_CACHE_S`)."""
    token = "t" * 43
    record = TokenRecord(
        home="h1",
        agent_id="a-1",
        agent_key=b"k" * 32,
        scopes=("ftw.live.read",),
        resource="http://127.0.0.1/mcp",
        client="c",
        expires_at_ms=wall_ms() + 3_600_000,
    )
    stored = {hash_token(token): record}

    async def lookup(digest: bytes) -> TokenRecord | None:  # SQLite off-thread: read, then return
        snapshot = stored.get(digest)
        await trio.sleep(1)
        return snapshot

    cache = TokenCache(lookup)
    async with trio.open_nursery() as inner:
        inner.start_soon(cache.verify, token)  # a request with the token, at that moment
        await trio.sleep(0.5)
        del stored[hash_token(token)]  # the revocation: the store drops it ...
        cache.clear()  # ... then the cache is emptied (`on_revoke`)
    assert await cache.verify(token) is None, "the revoked token is served from the cache"


# -- opening past the door's limit ------------------------------------------------------------


@pytest.mark.config(door_msgs_burst=1, door_msgs_per_s=0.1)
async def test_a_hello_dropped_at_the_door_is_refused_at_once(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """A `hello` the door drops past its limit is refused `E_RATE_LIMITED` at once, as message 1
    is; the opening once waited `handshake_s` for a `hello_ok` that could not come."""
    t0 = trio.current_time()
    err = await _outcome(rig, agent)
    assert isinstance(err, Refusal)
    assert (err.code, trio.current_time() - t0) == (Code.E_RATE_LIMITED, 0), (err, err.details)


# -- the roster applier's recovery -----------------------------------------------------------


class FailOnceStore(MemoryStore):
    """A store whose next roster write fails (a full disk, a locked database)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_next = False

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        await super().put_roster(home, seq, signed)


async def test_a_roster_whose_write_failed_is_stored_when_the_box_sends_it_again(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    """A roster whose save failed is saved when the box sends it again; `take_roster` once
    answered an identical roster with `roster.ok` alone, so the store kept the older roster
    (and `on_persist` never ran) until the owner changed the roster again."""
    rig = Rig(nursery)
    store = rig.store = rig.door.rosters.store = FailOnceStore()
    await rig.start()
    stub = await rig.add_home()
    with trio.fail_after(5):
        await rig.door.rosters_saved()  # seq 1 stored
    store.fail_next = True
    await rig.grant(stub)  # seq 2: accepted, its write fails
    await trio.sleep(1)  # (mock time, short of the applier's own retry after RETRY_S)
    assert store.rosters["h1"][0] == 1 and rig.door.rosters_unsaved == 1
    await rig.connect(stub)  # the box reconnects and sends its newest roster again
    await trio.sleep(1)  # (mock time) the door has taken that roster, and saved it
    assert store.rosters["h1"][0] == stub.owner.roster.seq, store.rosters["h1"][0]
    assert rig.door.rosters_unsaved == 0
