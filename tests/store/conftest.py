"""Fixtures of the store tests (the session's PostgreSQL server, `pg_server`, is tests/conftest.py's), and `store`,
which runs a test once on SQLite and once on PostgreSQL (a fresh database for each test)."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import trio

from ftwbridge.store import BridgeStore, SqliteStore
from tests.store.pgserver import PgServer

OpenSame = Callable[[], BridgeStore]


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of a new, empty database of its own for one test."""
    return pg_server.create_database()


@pytest.fixture(params=["sqlite", "postgres"])
def open_same(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenSame]:
    """Opens stores on one database (as two bridge processes would): SQLite in `tmp_path`, or
    PostgreSQL in a database of this test's own. Every store it made is closed at the end."""
    opened: list[BridgeStore] = []
    if request.param == "postgres":
        url = request.getfixturevalue("pg_url")

    def open_one() -> BridgeStore:
        if request.param == "sqlite":
            made: BridgeStore = SqliteStore(tmp_path / "bridge.sqlite")
        else:
            from ftwbridge.store.postgres import PgStore

            made = PgStore(url)
        opened.append(made)
        return made

    yield open_one
    for made in opened:
        made.close()


@pytest.fixture
async def store(open_same: OpenSame) -> BridgeStore:
    """A started, empty store, once on SQLite and once on PostgreSQL."""
    made = open_same()
    await made.start()
    return made


STOP_S = 60.0
"""How long a stopped child may take to exit after SIGTERM before SIGKILL, seconds: `serve`
drains (up to `drain_s`, 10 s, with calls in flight) and closes its listeners, uplinks and
database in bounded steps, which an overloaded machine stretched past trio's own 5 s."""


def stop_within(seconds: float) -> Callable[[trio.Process], Awaitable[None]]:
    """A `deliver_cancel` for `trio.run_process`: SIGTERM, then SIGKILL after `seconds`."""

    async def deliver(proc: trio.Process) -> None:
        proc.terminate()
        with trio.move_on_after(seconds):
            await proc.wait()
            return
        proc.kill()

    return deliver


async def first_line(nursery: trio.Nursery, argv: list[str], env: dict[str, str]) -> str:
    """Start `argv` in `nursery` (its standard input a pipe it watches, so it stops when the
    nursery is cancelled); returns the first line it prints (its "ready" line)."""
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            deliver_cancel=stop_within(STOP_S),
        )
    )
    assert proc.stdout is not None
    buf = b""
    while b"\n" not in buf:
        chunk = await proc.stdout.receive_some(4096)
        assert chunk, f"{argv[3:5]} exited before it started"
        buf += chunk
    return buf.split(b"\n", 1)[0].decode()
