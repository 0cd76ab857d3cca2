"""The limits' buckets (`ftwbridge.store.limits`): the same arithmetic in memory (one process,
SQLite) and in PostgreSQL's one statement, one bucket for every instance on PostgreSQL, a table
that stays bounded, and a database that does not answer refusing in words (fail closed)."""

from __future__ import annotations

import random

import psycopg
import pytest
import trio

from ftwbridge.oauth import OAuthError
from ftwbridge.oauth.limits import OAuthLimits
from ftwbridge.proto.pacing import TokenBucket
from ftwbridge.store import BridgeStore
from ftwbridge.store.limits import MemoryLimits, PgLimits, Rate, limit_store
from ftwbridge.store.postgres import PgStore
from tests.store.test_postgres import _allow_connections

T0 = 1_800_000_000_000
"""A wall-clock time, ms since the epoch."""


async def test_a_bucket_takes_refills_and_is_given_back(store: BridgeStore) -> None:
    buckets = limit_store(store)
    rate = Rate(3, 2.0)  # 3, then one every 500 ms
    assert [await buckets.take("x", "a", rate, T0) for _ in range(4)] == [True] * 3 + [False]
    assert await buckets.take("x", "b", rate, T0)  # another key has a bucket of its own
    assert await buckets.take("y", "a", rate, T0)  # and so has another limit
    assert not await buckets.take("x", "a", rate, T0 + 499)
    assert await buckets.take("x", "a", rate, T0 + 500)
    assert not await buckets.take("x", "a", rate, T0 + 500)
    await buckets.give("x", "a", rate, T0 + 500)
    assert await buckets.take("x", "a", rate, T0 + 500)
    for _ in range(5):  # given back beyond full: still only a full bucket
        await buckets.give("x", "b", rate, T0 + 10_000)
    assert [await buckets.take("x", "b", rate, T0 + 10_000) for _ in range(4)] == [True] * 3 + [
        False
    ]
    assert not await buckets.take("x", "b", rate, T0 + 9_000)  # a clock that went back: no refill
    with pytest.raises(ValueError):
        await buckets.take("x", "c", rate, T0, cost=4)
    with pytest.raises(ValueError):
        Rate(0, 1.0)


async def test_postgresql_computes_what_the_token_bucket_computes(pg_url: str) -> None:
    """Random takes and gives, each against `TokenBucket` itself and `PgLimits`' statement."""
    store = PgStore(pg_url, connections=2)
    try:
        await store.start()
        shared = PgLimits(store)
        rng = random.Random(13)
        for case in range(6):
            rate = Rate(rng.choice([1, 3, 10, 30]), rng.choice([0.1, 0.5, 1.0, 2.5]))
            bucket = TokenBucket(rate.burst, rate.per_ms)  # counting in ms, as both forms do
            now = T0
            for _ in range(60):
                now += rng.choice([0, 0, 1, 99, 400, 1000, 2500, 10_000])
                if rng.random() < 0.2:
                    await shared.give("k", str(case), rate, now)
                    bucket.charge(now, -1)
                    bucket.charge(now, max(0.0, bucket.tokens(now) - rate.burst))
                else:
                    expected = bucket.try_take(now)
                    assert await shared.take("k", str(case), rate, now) == expected
    finally:
        store.close()


async def test_instances_on_one_database_share_each_bucket_exactly(pg_url: str) -> None:
    stores = [PgStore(pg_url, connections=4) for _ in range(3)]
    try:
        for s in stores:
            await s.start()
        instances = [PgLimits(s) for s in stores]
        taken: list[bool] = []

        async def ask(at: PgLimits) -> None:
            taken.append(await at.take("guess", "", Rate(5, 0.5), T0))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for n in range(30):
                    nursery.start_soon(ask, instances[n % 3])
        assert sorted(taken) == [False] * 25 + [True] * 5  # five in all, not five each
        assert await instances[1].take("guess", "", Rate(5, 0.5), T0 + 2000)  # refilled one
    finally:
        for s in stores:
            s.close()


def _rows(url: str) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name, key FROM oauth_limits ORDER BY name, key").fetchall()
    return [(str(n), str(k)) for n, k in rows]


async def test_the_table_keeps_only_buckets_not_yet_full_and_a_bounded_number(
    pg_url: str,
) -> None:
    store = PgStore(pg_url, connections=2)
    try:
        await store.start()
        shared = PgLimits(store, max_keys=3)
        rate = Rate(10, 0.1)  # one ask leaves a bucket that is full again after 10 s
        for n in range(8):  # a flood of new addresses within a second
            assert await shared.take("by-address", f"192.0.2.{n}", rate, T0 + n)
        assert len(_rows(pg_url)) == 8
        await shared.take("by-address", "192.0.2.100", rate, T0 + 1000)  # purges: 3 newest stay
        assert _rows(pg_url) == [("by-address", f"192.0.2.{n}") for n in (100, 6, 7)]
        await shared.take("other", "", rate, T0 + 11_001)  # theirs are full again: gone
        assert _rows(pg_url) == [("other", "")]
        await shared.give("other", "", rate, T0 + 12_002)  # full again at once
        await shared.take("other", "x", rate, T0 + 13_003)
        assert _rows(pg_url) == [("other", "x")]
    finally:
        store.close()


async def test_guesses_are_refused_in_words_while_postgresql_does_not_answer(
    pg_url: str,
) -> None:
    store = PgStore(pg_url, wait_s=0.5)
    try:
        await store.start()
        limits = OAuthLimits(store)
        await limits.guess("192.0.2.1", T0)
        await trio.to_thread.run_sync(_allow_connections, pg_url, False)
        try:
            for ask in (limits.guess, limits.register, limits.start):
                with pytest.raises(OAuthError) as info:
                    await ask("192.0.2.1", T0)
                assert info.value.status == 503 and info.value.error == "temporarily_unavailable"
                assert "database does not answer" in info.value.description
        finally:
            await trio.to_thread.run_sync(_allow_connections, pg_url, True)
    finally:
        store.close()


async def test_memory_buckets_are_bounded_per_limit() -> None:
    buckets = MemoryLimits(max_keys=3)
    rate = Rate(2, 1.0)
    for name in "abcd":
        await buckets.take("by-address", name, rate, T0)
    assert buckets.keys("by-address") == 3  # "a" was the least recently charged: forgotten
    assert await buckets.take("by-address", "a", rate, T0)
    assert await buckets.take("by-address", "a", rate, T0)  # a full bucket again
    assert not await buckets.take("by-address", "a", rate, T0)
    await buckets.give("by-address", "b", rate, T0)  # given back to full: no bucket kept
    assert buckets.keys("by-address") == 2
