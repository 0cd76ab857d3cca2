"""Rosters take effect in the uplink's reader; the store write and the keys part's sync follow in
the roster applier, in order per home. MockClock (autojump); real door, pool, keys
part and stub box over memory links."""

from __future__ import annotations

import sqlite3

import pytest
import trio

from ftwbridge.door.applier import RETRY_S
from ftwbridge.proto.names import Read
from stubbox.uplink import StubHome
from tests.harness import MemoryStore, Rig, wall_ms


class SlowStore(MemoryStore):
    """A store whose roster writes wait for `release`, and that records their order."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()
        self.written: list[tuple[str, int]] = []

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        await self.release.wait()
        self.written.append((home, seq))
        await super().put_roster(home, seq, signed)


async def test_a_slow_disk_does_not_hold_the_homes_traffic(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    rig = Rig(nursery)
    store = rig.store = rig.door.rosters.store = SlowStore()
    await rig.start()
    stub = await rig.add_home()
    other = await rig.add_home("h2")
    key, _ = await rig.grant(stub)  # in effect at once, though not yet stored
    key2, _ = await rig.grant(stub)
    with trio.fail_after(5):
        reply = await rig.pool.call("h1", key, Read.LIVE_GET)
    assert reply.t == "live"
    assert rig.door.rosters_unsaved == 3 and store.written == []  # h1 at the disk; h2, h1 wait
    await stub.drop_agent(key2)  # revocation takes effect before the disk has it
    with trio.fail_after(5):
        await rig.door.wait_roster("h1", lambda r: key2 not in r.agents())
    assert await rig.keys.has(key2)  # the keys part forgets it once the roster is stored
    store.release.set()
    with trio.fail_after(5):
        await rig.door.rosters_saved()
    assert rig.door.rosters_unsaved == 0
    h1 = [seq for home, seq in store.written if home == "h1"]
    assert h1 == sorted(h1) and h1[-1] == 4  # in order; a newer one waiting replaced older ones
    assert store.rosters["h1"][0] == 4
    assert ("h2", other.owner.roster.seq) in store.written
    assert not await rig.keys.has(key2) and await rig.keys.has(key)


class SlowReadStore(MemoryStore):
    """A store whose roster reads take a second (a busy disk)."""

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        await trio.sleep(1)
        return await super().roster(home)


async def test_a_roster_taken_while_a_waiter_reads_the_store_wakes_it(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    """`wait_roster` looks at the store; a roster accepted during that look must still wake it
    (it once waited forever, and homes enrolled late in a fleet never came up)."""
    rig = Rig(nursery)
    rig.store = rig.door.rosters.store = SlowReadStore()
    await rig.start()
    stub = StubHome("h1", seed="h1", clock=wall_ms)
    await rig.store.enroll_home("h1", stub.owner.home_public_key)
    got: list[int] = []
    woke = trio.Event()

    async def waiter() -> None:
        got.append((await rig.door.wait_roster("h1", lambda r: True)).seq)
        woke.set()

    nursery.start_soon(waiter)
    await trio.sleep(0.5)  # the waiter is in the middle of its store read
    await rig.connect(stub)
    with trio.fail_after(10):
        await woke.wait()
    assert got == [1]


class FullStore(MemoryStore):
    """A store on a full disk until `space` is set: roster writes fail as SQLite's do."""

    def __init__(self) -> None:
        super().__init__()
        self.space = False
        self.tries = 0

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        self.tries += 1
        if not self.space:
            raise sqlite3.OperationalError("database or disk is full")
        await super().put_roster(home, seq, signed)


async def test_a_roster_taken_on_a_full_disk_is_saved_once_space_returns(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The roster is in effect at once; its save is tried again every `RETRY_S` with no word
    from the box, and the log says what to do."""
    rig = Rig(nursery)
    store = rig.store = rig.door.rosters.store = FullStore()
    await rig.start()
    stub = await rig.add_home()
    key, _ = await rig.grant(stub)
    with trio.fail_after(5):
        assert (await rig.pool.call("h1", key, Read.LIVE_GET)).t == "live"
    await trio.sleep(3 * RETRY_S)
    assert store.rosters == {} and rig.door.rosters_unsaved == 1 and store.tries >= 3
    assert "is in effect but was not saved" in caplog.text
    assert "the disk holding the state is full; free space there" in caplog.text
    store.space = True
    await trio.sleep(RETRY_S + 1)
    assert store.rosters["h1"][0] == stub.owner.roster.seq and rig.door.rosters_unsaved == 0
    tries = store.tries
    await trio.sleep(3 * RETRY_S)
    assert store.tries == tries  # saved: nothing more to try
