"""The sign-in state's store operations, once on SQLite and once on PostgreSQL (`store`,
`open_same`): one item read, compared-and-set, taken once, found by what its record says, and
swept by time; and two processes on one database racing for the same item, one winning."""

from __future__ import annotations

import trio

from ftwbridge.store import BridgeStore
from tests.store.conftest import OpenSame

NOW = 1_000_000


async def test_read_one_item_live_or_not(store: BridgeStore) -> None:
    await store.put_oauth_state("consent", "r1", {"status": "new"}, NOW + 10)
    assert await store.oauth_state("consent", "r1", NOW) == ({"status": "new"}, NOW + 10)
    assert await store.oauth_state("consent", "r1", NOW + 10) is None  # expired
    assert await store.oauth_state("consent", "r2", NOW) is None
    assert await store.oauth_state("code", "r1", NOW) is None  # another kind


async def test_change_is_a_compare_and_set(store: BridgeStore) -> None:
    await store.put_oauth_state("consent", "r1", {"status": "new", "tries": 0}, NOW + 10)
    changed = await store.change_oauth_state(
        "consent", "r1", {"status": "asked", "home": "h1"}, NOW, where={"status": "new"}
    )
    assert changed == {"status": "asked", "tries": 0, "home": "h1"}
    # a second step that read `new` finds it changed: nothing written
    again = await store.change_oauth_state(
        "consent", "r1", {"status": "failed"}, NOW, where={"status": "new"}
    )
    assert again is None
    assert (await store.oauth_state("consent", "r1", NOW)) == (changed, NOW + 10)
    # the type counts, as in JSON: `false` is not `0`
    await store.put_oauth_state("code", "c1", {"used": False}, NOW + 10)
    assert await store.change_oauth_state("code", "c1", {"x": 1}, NOW, where={"used": 0}) is None
    assert await store.change_oauth_state("code", "c1", {"used": True}, NOW, where={"used": False})
    # unknown and expired items are not changed
    assert await store.change_oauth_state("code", "zz", {"used": True}, NOW) is None
    assert await store.change_oauth_state("code", "c1", {"x": 1}, NOW + 10) is None


async def test_take_gives_an_item_once(store: BridgeStore) -> None:
    await store.put_oauth_state("claim", "d1", {"home": "h1"}, NOW + 10)
    assert await store.take_oauth_state("claim", "d1", NOW) == {"home": "h1"}
    assert await store.take_oauth_state("claim", "d1", NOW) is None
    await store.put_oauth_state("consent", "r1", {"status": "asked"}, NOW + 10)
    assert await store.take_oauth_state("consent", "r1", NOW, where={"status": "approved"}) is None
    assert await store.oauth_state("consent", "r1", NOW) is not None  # not matched: kept
    await store.put_oauth_state("claim", "d2", {"home": "h1"}, NOW + 10)
    assert await store.take_oauth_state("claim", "d2", NOW + 10) is None  # expired: gone
    assert await store.oauth_states("claim", 0) == []


async def test_find_by_record_and_drop_by_record(store: BridgeStore) -> None:
    await store.put_oauth_state("consent", "a", {"home": "h1", "status": "asked"}, NOW + 10)
    await store.put_oauth_state("consent", "b", {"home": "h1", "status": "new"}, NOW + 10)
    await store.put_oauth_state("consent", "c", {"home": "h2", "status": "asked"}, NOW + 10)
    await store.put_oauth_state("consent", "d", {"home": "h1", "status": "asked"}, NOW)
    found = await store.find_oauth_states("consent", NOW, {"home": "h1", "status": "asked"})
    assert found == [("a", {"home": "h1", "status": "asked"}, NOW + 10)]  # d has expired
    await store.put_oauth_state("claim", "x", {"home": "h1"}, NOW + 10)
    await store.put_oauth_state("claim", "y", {"home": "h2"}, NOW + 10)
    assert await store.drop_oauth_states("claim", {"home": "h1"}) == 1
    assert [k for k, _, _ in await store.oauth_states("claim", NOW)] == ["y"]


async def test_expire_returns_what_it_deleted(store: BridgeStore) -> None:
    await store.put_oauth_state("consent", "old", {"agent_key": "aa"}, NOW)
    await store.put_oauth_state("consent", "live", {"agent_key": "bb"}, NOW + 1)
    await store.put_oauth_state("code", "old", {}, NOW)
    assert await store.expire_oauth_states("consent", NOW) == [("old", {"agent_key": "aa"}, NOW)]
    assert await store.expire_oauth_states("consent", NOW) == []  # once
    assert [k for k, _, _ in await store.oauth_states("consent", 0)] == ["live"]
    assert [k for k, _, _ in await store.oauth_states("code", 0)] == ["old"]  # another kind


async def test_two_processes_race_for_one_item_and_one_wins(open_same: OpenSame) -> None:
    """Ten tries at once from two stores on one database (two instances): a compare-and-set
    succeeds once and a take gives the item once."""
    one, two = open_same(), open_same()
    await one.start()
    await two.start()
    await one.put_oauth_state("code", "c", {"used": False}, NOW + 10)
    await one.put_oauth_state("claim", "d", {"home": "h1"}, NOW + 10)
    won: list[object] = []
    taken: list[object] = []

    async def redeem(store: BridgeStore, n: int) -> None:
        got = await store.change_oauth_state(
            "code", "c", {"used": True, "by": n}, NOW, where={"used": False}
        )
        if got is not None:
            won.append(got)
        record = await store.take_oauth_state("claim", "d", NOW)
        if record is not None:
            taken.append(record)

    async with trio.open_nursery() as nursery:
        for n in range(10):
            nursery.start_soon(redeem, one if n % 2 else two, n)
    assert len(won) == 1 and len(taken) == 1
    record, _ = await two.oauth_state("code", "c", NOW) or ({}, 0)
    assert record == won[0]
