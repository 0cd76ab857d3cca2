"""Shared fixtures: the contract's test vectors, and `env`, a bridge on a real port.

`@pytest.mark.config(**fields)` sets `Config` fields for the test's bridge: the `env` fixture's
here, the in-memory `rig`'s in tests/pool.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from tests.store.pgserver import PgServer, postgres_bin, running_postgres

if TYPE_CHECKING:
    from tests.e2e.env import Env

VECTORS = Path(__file__).parent / "vectors"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "config(**fields): Config fields for the bridge the test starts (env, rig)"
    )


@pytest.fixture
async def env(
    nursery: trio.Nursery, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Env]:
    """A bridge in this process on 127.0.0.1 port 0, its state under `tmp_path / "bridge"`;
    stub homes join it as processes (tests/e2e/env.py). It stops when the test ends."""
    from tests.e2e.env import start_env  # the bridge's imports are for the tests that use it

    marker = request.node.get_closest_marker("config")
    e = await start_env(nursery, tmp_path / "bridge", **(marker.kwargs if marker else {}))
    yield e
    nursery.cancel_scope.cancel()


@pytest.fixture(scope="session")
def webapp_vectors() -> dict[str, Any]:
    return json.loads((VECTORS / "webapp-vectors.json").read_text())


@pytest.fixture(scope="session")
def cacophony() -> dict[str, Any]:
    return json.loads((VECTORS / "cacophony-IK_25519_ChaChaPoly_SHA256.json").read_text())


def _descendants(pid: int) -> dict[int, str]:
    """Every descendant of `pid` with its command line (Linux /proc)."""
    out: dict[int, str] = {}
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                try:
                    cmd = Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                out[kid] = cmd
                todo.append(kid)
    return out


@pytest.fixture(scope="session", autouse=True)
def no_child_outlives_the_tests() -> Iterator[None]:
    """After the whole run, no stub home or bridge process that a test started is left (issue
    17): every test owns what it starts. Waits a bounded time for exits already under way."""
    yield
    deadline = time.monotonic() + 30
    while True:
        left = {
            pid: cmd
            for pid, cmd in _descendants(os.getpid()).items()
            if "stubbox" in cmd or "ftwbridge" in cmd or "bridge_server" in cmd
        }
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # exits of other processes: no event reaches this one
    assert not left, f"processes outlived the tests: {left}"


NO_POSTGRES = (
    "PostgreSQL is not installed here (no initdb/pg_ctl on PATH or in /usr/lib/postgresql):"
    " `make postgres` installs Debian's postgresql; the PostgreSQL cases are skipped"
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One throwaway PostgreSQL server for the whole test session (the store, keys and
    cluster tests share it; each takes databases of its own), stopped at its end."""
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip(NO_POSTGRES)
    with running_postgres(bindir) as server:
        yield server
