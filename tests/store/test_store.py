"""The store's contract, run once on SQLite and once on PostgreSQL (the `store` fixture):
homes, rosters, tokens, OAuth clients and refresh tokens, and what two processes on one
database see of each other's writes."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import trio

from ftwbridge.store import BridgeStore, SqliteStore, TokenRecord, hash_token
from tests.store.conftest import OpenSame

KEY = b"a" * 32
RECORD = TokenRecord("h1", "a1", KEY, ("ftw.live.read", "ftw.plan.read"), "http://x/mcp", "c", 123)


async def test_homes_rosters_and_tokens(store: BridgeStore) -> None:
    await store.enroll_home("h1", b"k" * 32)
    assert await store.home_key("h1") == b"k" * 32 and await store.home_key("h2") is None
    await store.enroll_home("h1", b"n" * 32)  # re-enrolled: replaced
    assert await store.home_key("h1") == b"n" * 32
    assert await store.roster("h1") is None
    await store.put_roster("h1", 3, b"roster")
    await store.put_roster("h1", 4, b"newer")
    assert await store.roster("h1") == (4, b"newer")
    await store.put_token(hash_token("t"), RECORD)
    assert await store.token(hash_token("t")) == RECORD
    assert await store.token(hash_token("other")) is None
    assert await store.withdraw_agent_tokens("h1", KEY) == 1
    assert await store.token(hash_token("t")) == dataclasses.replace(RECORD, withdrawn=True)
    assert await store.withdraw_agent_tokens("h2", KEY) == 0
    assert await store.drop_agent_tokens("h1", KEY) == 1
    assert await store.token(hash_token("t")) is None
    await store.put_token(hash_token("u"), RECORD)
    assert await store.drop_token(hash_token("u")) == 1
    assert await store.drop_token(hash_token("u")) == 0


async def test_home_keys_of_many_homes(store: BridgeStore) -> None:
    for i in range(0, 1010, 10):  # some enrolled; the names asked for are more than 500
        await store.enroll_home(f"h{i}", i.to_bytes(32, "big"))
    keys = await store.home_keys([f"h{i}" for i in range(1010)])
    assert keys == {f"h{i}": i.to_bytes(32, "big") for i in range(0, 1010, 10)}
    assert await store.home_keys([]) == {}


async def test_write_mark_moves_when_another_process_enrolls(open_same: OpenSame) -> None:
    bridge, command_line = open_same(), open_same()
    await bridge.start()
    await command_line.start()
    mark = await bridge.write_mark()
    assert await bridge.write_mark() == mark  # nothing written: it stays
    await command_line.enroll_home("h1", b"k" * 32)
    moved = await bridge.write_mark()
    assert moved != mark
    assert await bridge.home_key("h1") == b"k" * 32


async def test_oauth_clients_expire(store: BridgeStore) -> None:
    meta = {"client_name": "Claude", "redirect_uris": ["https://x/cb"], "n": 1}
    await store.put_client("c1", meta, expires_at_ms=1000)
    assert await store.client("c1", now_ms=999) == meta
    assert await store.client("c1", now_ms=1000) is None
    assert await store.client("c2", now_ms=0) is None
    await store.put_client("c1", {**meta, "n": 2}, expires_at_ms=5000)  # registered again
    assert await store.client("c1", now_ms=1000) == {**meta, "n": 2}
    await store.put_client("c3", meta, expires_at_ms=10)
    await store.purge_clients(now_ms=1000)
    assert await store.client("c3", now_ms=0) is None
    assert await store.client("c1", now_ms=0) is not None


async def test_sign_in_state_outlives_a_restart_and_expires_on_load(
    store: BridgeStore,
) -> None:
    """Pending consents, codes and claim offers on both engines."""
    await store.put_oauth_state("code", "k1", {"home": "h1", "n": 1}, expires_at_ms=1000)
    await store.put_oauth_state("code", "k2", {"home": "h2"}, expires_at_ms=10)
    await store.put_oauth_state("consent", "k1", {"other": True}, expires_at_ms=1000)
    await store.put_oauth_state("code", "k1", {"home": "h1", "n": 2}, expires_at_ms=2000)
    assert await store.oauth_states("code", now_ms=500) == [("k1", {"home": "h1", "n": 2}, 2000)]
    assert await store.oauth_states("code", now_ms=0) == [("k1", {"home": "h1", "n": 2}, 2000)]
    await store.drop_oauth_state("code", "k1")
    await store.drop_oauth_state("code", "never")
    assert await store.oauth_states("code", now_ms=0) == []
    assert await store.oauth_states("consent", now_ms=999) == [("k1", {"other": True}, 1000)]
    assert await store.oauth_states("consent", now_ms=1000) == []


async def test_refresh_tokens_rotate_and_are_revoked(store: BridgeStore) -> None:
    record = {"home": "h1", "agentKey": KEY.hex(), "scopes": ["ftw.live.read"]}
    other = {"home": "h1", "agentKey": (b"b" * 32).hex()}
    await store.put_refresh(hash_token("r1"), "fam", record, expires_at_ms=1000)
    await store.put_refresh(hash_token("r2"), "fam", record, expires_at_ms=1000)
    await store.put_refresh(hash_token("r3"), "fam2", other, expires_at_ms=1000)
    assert await store.refresh_record(hash_token("r1"), now_ms=0) == record
    assert await store.refresh_record(hash_token("r1"), now_ms=1000) is None  # expired
    assert await store.use_refresh(hash_token("r1"), now_ms=0) == ("fam", False, record)
    assert await store.use_refresh(hash_token("r1"), now_ms=0) == ("fam", True, record)
    assert await store.use_refresh(hash_token("r1"), now_ms=1000) is None
    assert await store.use_refresh(hash_token("nope"), now_ms=0) is None
    await store.drop_family("fam")
    assert await store.refresh_record(hash_token("r2"), now_ms=0) is None
    await store.drop_refresh_of_agent("h1", b"b" * 32)
    assert await store.refresh_record(hash_token("r3"), now_ms=0) is None


async def test_a_refresh_token_used_by_two_processes_at_once_is_used_once(
    open_same: OpenSame,
) -> None:
    first, second = open_same(), open_same()
    await first.start()
    await second.start()
    answers: list[bool] = []
    for round_ in range(20):
        token = hash_token(f"r{round_}")
        await first.put_refresh(token, f"fam{round_}", {"home": "h1"}, expires_at_ms=10**15)
        used: list[bool] = []

        async def use(store: BridgeStore, token: bytes = token, used: list[bool] = used) -> None:
            got = await store.use_refresh(token, now_ms=0)
            assert got is not None
            used.append(got[1])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(use, first)
            nursery.start_soon(use, second)
        assert sorted(used) == [False, True]  # exactly one of them got it fresh
        answers += used
    assert len(answers) == 40


async def test_sqlite_database_from_before_withdrawn_tokens_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE tokens (hash BLOB PRIMARY KEY, home TEXT NOT NULL, agent_id TEXT NOT NULL,"
        " agent_key BLOB NOT NULL, scopes TEXT NOT NULL, resource TEXT NOT NULL,"
        " client TEXT NOT NULL, expires_at_ms INTEGER NOT NULL)"
    )
    db.execute(
        "INSERT INTO tokens VALUES (?, 'h1', 'a1', ?, '[]', 'http://x/mcp', 'c', 5)",
        (hash_token("old"), KEY),
    )
    db.commit()
    db.close()
    store = SqliteStore(path)
    record = await store.token(hash_token("old"))
    assert record is not None and not record.withdrawn
    assert await store.withdraw_agent_tokens("h1", KEY) == 1
    store.close()
