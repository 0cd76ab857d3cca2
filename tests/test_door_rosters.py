"""A roster held for a home whose uplink is at another instance can be older than the store's
(`Rosters.grant`, issue 13): a token minted there for a new agent must work here at once, not
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
