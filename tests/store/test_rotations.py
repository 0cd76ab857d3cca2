"""Refresh rotations in the store (`ftwbridge.store.rotations`), once on SQLite and once on
PostgreSQL: a token is rotated once, its rotation answers repeats for the window, the window
closes when it ends or when the child is used, and revoking the family takes it all."""

from __future__ import annotations

import trio

from ftwbridge.store import BridgeStore, SqliteStore, hash_token
from ftwbridge.store.postgres import PgStore
from ftwbridge.store.rotations import Child, refresh_rotations
from tests.store.conftest import OpenSame

T0 = 1_800_000_000_000
RECORD = {"home": "h1", "agentKey": "61" * 32, "scopes": ["ftw.live.read"], "client": "c"}
DAY_MS = 86_400_000


async def rotation_rows(store: BridgeStore) -> int:
    """How many rotations the store keeps (each holds a sealed pair)."""
    sql = "SELECT count(*) FROM refresh_rotations"
    if isinstance(store, SqliteStore):
        return int((await store.run(lambda db: db.execute(sql).fetchone()))[0])
    assert isinstance(store, PgStore)
    return int((await store.query(lambda db: db.execute(sql).fetchone()))[0])


def child(name: str, until_ms: int) -> Child:
    return Child(hash_token(name), RECORD | {"scopes": []}, T0 + DAY_MS, name.encode(), until_ms)


async def test_a_token_is_rotated_once_and_its_rotation_answers_for_the_window(
    store: BridgeStore,
) -> None:
    kept = refresh_rotations(store)
    parent = hash_token("parent")
    await store.put_refresh(parent, "fam", RECORD, T0 + DAY_MS)
    state = await kept.refresh_state(parent, T0)
    assert state is not None and state.family == "fam" and state.record == RECORD
    assert not state.used and state.graced is None
    before = await kept.rotate(parent, T0, child("c1", T0 + 10_000))
    assert before == state  # unused before: this call rotated it
    again = await kept.rotate(parent, T0 + 5, child("c2", T0 + 10_005))
    assert again is not None and again.used and again.graced is not None
    assert again.graced.child == hash_token("c1") and again.graced.sealed == b"c1"
    assert await kept.refresh_state(hash_token("c2"), T0) is None  # the loser kept nothing
    new = await kept.refresh_state(hash_token("c1"), T0)
    assert new is not None and new.family == "fam" and new.record["scopes"] == [] and not new.used
    late = await kept.refresh_state(parent, T0 + 10_000)
    assert late is not None and late.used and late.graced is None  # the window has ended
    assert (await kept.refresh_state(parent, T0 + 9_999)).graced is not None  # type: ignore[union-attr]
    assert await rotation_rows(store) == 1
    await kept.rotate(hash_token("c1"), T0 + 10, child("c3", T0 + 10_010))
    closed = await kept.refresh_state(parent, T0 + 20)
    assert closed is not None and closed.used and closed.graced is None  # its child was used
    assert await rotation_rows(store) == 1  # c1's own; the parent's sealed pair is gone
    await store.drop_family("fam")
    if isinstance(store, PgStore):  # on SQLite a revoked pair's rotation waits for the purge
        assert await rotation_rows(store) == 0  # on PostgreSQL it goes with its parent's row
    for name in ("parent", "c1", "c3"):
        assert await kept.refresh_state(hash_token(name), T0 + 30) is None
    assert await kept.rotate(parent, T0 + 30, child("c4", T0 + 10_030)) is None
    assert await kept.refresh_state(hash_token("c4"), T0 + 30) is None


async def test_strict_rotation_keeps_no_answer(store: BridgeStore) -> None:
    kept = refresh_rotations(store)
    await store.put_refresh(hash_token("p"), "fam", RECORD, T0 + DAY_MS)
    await kept.rotate(hash_token("p"), T0, child("c", T0))  # a window of 0 ms
    state = await kept.refresh_state(hash_token("p"), T0)
    assert state is not None and state.used and state.graced is None
    assert await kept.refresh_state(hash_token("c"), T0) is not None


async def test_two_processes_rotating_one_token_at_once_rotate_it_once(
    open_same: OpenSame,
) -> None:
    stores = [open_same(), open_same()]
    for s in stores:
        await s.start()
    await stores[0].put_refresh(hash_token("p"), "fam", RECORD, T0 + DAY_MS)
    won: list[bool] = []

    async def rotate(n: int) -> None:
        before = await refresh_rotations(stores[n % 2]).rotate(
            hash_token("p"), T0, child(f"c{n}", T0 + 10_000)
        )
        assert before is not None
        won.append(not before.used)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(rotate, n)
    assert sorted(won) == [False] * 7 + [True]
    state = await refresh_rotations(stores[1]).refresh_state(hash_token("p"), T0)
    assert state is not None and state.graced is not None
    kept = [n for n in range(8) if await stores[0].refresh_record(hash_token(f"c{n}"), T0)]
    assert len(kept) == 1 and state.graced.child == hash_token(f"c{kept[0]}")
