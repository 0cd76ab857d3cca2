"""What is PostgreSQL's alone: migrations (ordered, once, by one instance at a time), the
sentence when the database cannot be reached, and connections that break under the pool."""

from __future__ import annotations

import logging

import psycopg
import pytest
import trio

from ftwbridge.door.rosters import HOME_KEY_CHECK_S
from ftwbridge.store import StoreError, hash_token
from ftwbridge.store.migrate import Migration, bundled, plan
from ftwbridge.store.postgres import PgStore, describe
from tests.store.pgserver import PgServer


def test_plan_applies_what_is_missing_in_order_and_names_what_it_does_not_know() -> None:
    known = [Migration(2, "0002_b.sql", ""), Migration(1, "0001_a.sql", "")]
    todo, unknown = plan(known, applied=set())
    assert [m.version for m in todo] == [1, 2] and unknown == []
    todo, unknown = plan(known, applied={1, 7, 5})
    assert [m.version for m in todo] == [2] and unknown == [5, 7]


def test_bundled_migrations_are_numbered_from_one() -> None:
    found = bundled()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert found[0].name == "0001_initial.sql" and "CREATE TABLE homes" in found[0].sql


def _versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]


async def test_instances_starting_at_once_migrate_once(pg_url: str) -> None:
    stores = [PgStore(pg_url, connections=2) for _ in range(4)]
    applied: list[list[str]] = []

    async def start(store: PgStore) -> None:
        applied.append(await store.start())

    try:
        async with trio.open_nursery() as nursery:
            for store in stores:
                nursery.start_soon(start, store)
        everything = [m.name for m in bundled()]
        assert sorted(applied, key=len) == [[], [], [], everything]
        assert _versions(pg_url) == [m.version for m in bundled()]
        assert await stores[0].start() == []  # a restart finds nothing to do
        await stores[1].enroll_home("h1", b"k" * 32)
        assert await stores[2].home_key("h1") == b"k" * 32
    finally:
        for store in stores:
            store.close()


async def test_a_newer_schema_is_said_and_used(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PgStore(pg_url)
    try:
        await store.start()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (9, '0009_x.sql')")
        with caplog.at_level(logging.WARNING, logger="ftwbridge.store"):
            assert await store.start() == []
        assert "versions 9" in caplog.text and "newer bridge" in caplog.text
    finally:
        store.close()


async def test_a_failing_migration_leaves_the_schema_as_it_was(pg_url: str) -> None:
    store = PgStore(pg_url)
    try:
        from ftwbridge.store import migrate

        good = bundled()
        bad = Migration(len(good) + 1, "0099_bad.sql", "CREATE TABLE x (a INT); SELEC 1;")
        with psycopg.connect(pg_url, autocommit=True) as conn, pytest.raises(psycopg.Error):
            migrate.apply(conn, [*good, bad])
        with psycopg.connect(pg_url) as conn:  # not even the good ones: one transaction
            assert conn.execute("SELECT to_regclass('homes')").fetchone() == (None,)
    finally:
        store.close()


async def test_an_unreachable_database_is_one_sentence_without_the_password(
    pg_server: PgServer,
) -> None:
    with pytest.raises(StoreError) as refused:
        PgStore("postgresql://u:hunter2@127.0.0.1/db?no_such_option=1")
    assert "hunter2" not in str(refused.value) and "database_url" in str(refused.value)
    with socket_closed() as port:
        store = PgStore(f"postgresql://ftw:hunter2@127.0.0.1:{port}/ftw?connect_timeout=5")
        with pytest.raises(StoreError) as refused:
            await store.start()
        store.close()
    text = str(refused.value)
    assert text.startswith(f"PostgreSQL database ftw at 127.0.0.1:{port} does not answer: ")
    assert "hunter2" not in text and "\n" not in text
    wrong_db = pg_server.url_of("no_such_db")
    with pytest.raises(StoreError) as refused:
        await PgStore(wrong_db).start()
    expected = 'refuses the connection: database "no_such_db" does not exist'
    assert str(refused.value) == (  # the server refused: it did answer
        f"PostgreSQL database no_such_db at 127.0.0.1:{pg_server.port} {expected}"
    )
    assert describe("postgresql://x:pw@db.internal/ftw") == "PostgreSQL database ftw at db.internal"


async def test_connections_ended_under_the_pool_are_replaced(pg_url: str) -> None:
    store = PgStore(pg_url, connections=3)
    try:
        await store.start()
        await store.enroll_home("h1", b"k" * 32)
        await store.put_refresh(hash_token("r"), "fam", {"home": "h1"}, expires_at_ms=10**15)
        async with trio.open_nursery() as nursery:  # three connections in the pool
            for _ in range(3):
                nursery.start_soon(store.home_key, "h1")

        def end_backends() -> None:  # as PostgreSQL's restart or an operator would
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )

        end_backends()
        assert await store.home_key("h1") == b"k" * 32  # a read is tried again, and works
        end_backends()
        with pytest.raises(StoreError, match="does not answer"):
            await store.use_refresh(hash_token("r"), now_ms=0)  # never tried twice
        assert await store.refresh_record(hash_token("r"), now_ms=0) == {"home": "h1"}
    finally:
        store.close()


class socket_closed:
    """A port of 127.0.0.1 that nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


def _allow_connections(url: str, allowed: bool) -> None:
    """Let no one connect to `url`'s database (as in an outage), or everyone again."""
    admin = url.rsplit("/", 1)[0] + "/postgres"
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS {str(allowed).lower()}")
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )


async def test_the_write_mark_outlasts_an_outage(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, command_line = PgStore(pg_url, wait_s=0.5), PgStore(pg_url)
    try:
        await store.start()
        await command_line.start()
        mark = await store.write_mark()
        await trio.to_thread.run_sync(_allow_connections, pg_url, False)
        with caplog.at_level(logging.WARNING, logger="ftwbridge.store"):
            assert await store.write_mark() == mark  # the door's poll goes on
            assert await store.write_mark() == mark
            with pytest.raises(StoreError, match="does not answer"):
                await store.home_key("h1")  # a lookup is refused in words
            await trio.to_thread.run_sync(_allow_connections, pg_url, True)
            await command_line.enroll_home("h1", b"k" * 32)
            for _poll in range(30):  # as the door polls, until the pool has reconnected
                if await store.write_mark() != mark:
                    break
                await trio.sleep(HOME_KEY_CHECK_S)
            else:
                pytest.fail("the change made after the outage was never noticed")
        warnings = [r.getMessage() for r in caplog.records if r.name == "ftwbridge.store"]
        assert len(warnings) == 2, warnings  # said once when it went, once when it came back
        assert "home keys are checked again" in warnings[0] and "answers again" in warnings[1]
    finally:
        store.close()
        command_line.close()
