"""A roster held for a home whose uplink is at another instance can be older than the store's
(`Rosters.grant`): a token minted there for a new agent must work here at once, not
read "withdrawn" until the `roster` event arrives; and a withdrawn agent's requests must not
become a store read each. MockClock; the store in memory."""

from __future__ import annotations

import time

import trio

from ftwbridge.config import Config
from ftwbridge.door import Door
from ftwbridge.door.rosters import REREAD_S
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.proto.roster import AgentGrant
from stubbox.owner import Owner
from tests.harness import MemoryStore

KEY = bytes(range(32))


class CountingStore(MemoryStore):
    """`MemoryStore` counting its roster reads."""

    def __init__(self) -> None:
        super().__init__()
        self.roster_reads = 0

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        self.roster_reads += 1
        return await super().roster(home)


def _grant() -> AgentGrant:
    now = int(time.time() * 1000)
    return AgentGrant(
        "a-1", "test", "Test assistant", tuple(READ_SCOPES), (), {}, now, now + 3_600_000
    )


async def test_a_row_the_held_copy_lacks_is_read_from_the_store_at_most_once_a_second(
    autojump_clock: trio.abc.Clock,
) -> None:
    owner = Owner("h1", seed="h1")
    store = CountingStore()
    await store.enroll_home("h1", owner.home_public_key)
    await store.put_roster("h1", owner.roster.seq, owner.signed)
    door = Door(config=Config(), store=store)
    assert await door.grant("h1", KEY) is None  # held from now on, without the agent
    reads = store.roster_reads
    await trio.sleep(REREAD_S)

    signed = owner.put_agent(KEY, _grant(), now_ms=int(time.time() * 1000))
    await store.put_roster("h1", owner.roster.seq, signed)  # another instance saved it
    found = await door.grant("h1", KEY)
    assert found is not None and found.id == "a-1"
    assert store.roster_reads == reads + 1

    other = bytes(32)  # an agent no roster lists: one read a second at most
    await trio.sleep(REREAD_S)
    reads = store.roster_reads
    for _ in range(50):
        assert await door.grant("h1", other) is None
    assert store.roster_reads == reads + 1
    await trio.sleep(REREAD_S)
    assert await door.grant("h1", other) is None
    assert store.roster_reads == reads + 2


async def test_an_older_roster_never_replaces_a_newer_one_the_store_holds(
    autojump_clock: trio.abc.Clock,
) -> None:
    """This instance accepted the box's roster 2; before its save ran, another instance saved
    the box's roster 3 (the box moved there). The save of 2 compares the signed seqs and
    leaves 3; the `seq` column beside them decides nothing (it lies here: 99 over roster 1)."""
    owner = Owner("h1", seed="h1")
    store = MemoryStore()
    await store.enroll_home("h1", owner.home_public_key)
    await store.put_roster("h1", owner.roster.seq, owner.signed)
    door = Door(config=Config(), store=store)
    now = int(time.time() * 1000)
    second = owner.put_agent(KEY, _grant(), now_ms=now)
    assert (await door.rosters.take_roster("h1", second))[0]
    third = owner.drop_agent(KEY, now_ms=now)
    await store.put_roster("h1", 1, third)  # another instance; its column says 1
    async with trio.open_nursery() as nursery:
        await nursery.start(door.apply_rosters)
        with trio.fail_after(5):
            await door.rosters_saved()
        nursery.cancel_scope.cancel()
    assert (await store.roster("h1")) == (1, third)
    fourth = owner.put_agent(KEY, _grant(), now_ms=now)
    await store.put_roster("h1", 99, second)  # the older 2, under a column that says 99
    assert (await door.rosters.take_roster("h1", fourth))[0]
    async with trio.open_nursery() as nursery:
        await nursery.start(door.apply_rosters)
        with trio.fail_after(5):
            await door.rosters_saved()
        nursery.cancel_scope.cancel()
    assert (await store.roster("h1")) == (4, fourth)  # 4 is newer than the signed 2


class SlowStore(MemoryStore):
    """`MemoryStore` whose roster reads take `READ_S` (MockClock), as a loaded database's do."""

    READ_S = 1.0

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        found = await super().roster(home)  # read at the start, answered at the end
        await trio.sleep(self.READ_S)
        return found


async def test_a_store_read_overtaken_by_a_roster_event_is_not_held(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A read of the store begins; before it answers, another instance saves a newer roster
    and its `roster` event forgets the copy here. The read's older roster is answered to its
    caller but not held: the next look reads the store again and finds the newer one."""
    owner = Owner("h1", seed="h1")
    store = SlowStore()
    await store.enroll_home("h1", owner.home_public_key)
    await store.put_roster("h1", owner.roster.seq, owner.signed)
    door = Door(config=Config(), store=store)
    signed = owner.put_agent(KEY, _grant(), now_ms=int(time.time() * 1000))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(door.roster, "h1")  # reads the store's roster 1
        await trio.sleep(SlowStore.READ_S / 2)
        await store.put_roster("h1", owner.roster.seq, signed)  # another instance saved 2
        door.forget_roster("h1")  # its `roster` event
    newest = await door.roster("h1")
    assert newest is not None and newest.seq == owner.roster.seq and KEY in newest.agents()


async def test_a_roster_event_wakes_a_wait_for_a_roster(autojump_clock: trio.abc.Clock) -> None:
    """`wait_roster` for a home whose uplink is elsewhere looks again when the `roster` event
    forgets the copy here, and not before (no polling)."""
    owner = Owner("h1", seed="h1")
    store = CountingStore()
    await store.enroll_home("h1", owner.home_public_key)
    await store.put_roster("h1", owner.roster.seq, owner.signed)
    door = Door(config=Config(), store=store)
    found = []

    async def wait() -> None:
        found.append(await door.wait_roster("h1", lambda roster: KEY in roster.agents()))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(30)
            assert found == [] and store.roster_reads == 1
            await store.put_roster("h1", 2, owner.put_agent(KEY, _grant(), now_ms=0))
            door.forget_roster("h1")
    assert found[0].seq == owner.roster.seq and store.roster_reads == 2
