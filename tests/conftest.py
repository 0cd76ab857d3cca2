"""Shared fixtures: the contract's test vectors, and `env`, a bridge on a real port.

`@pytest.mark.config(**fields)` sets `Config` fields for the test's bridge: the `env` fixture's
here, the in-memory `rig`'s in tests/pool.

`make test` runs the tests on several pytest-xdist workers (`--dist loadgroup`); the hooks at
the end of this file keep the tests that share one server on one worker and hand out the
longest tests first.
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

pytest_plugins = ["tests.failfirst"]  # a failure inside nurseries shows its failing line first


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
    """After the whole run, no stub home or bridge process that a test started is left
    (docs/operations.md, "Child processes"): every test owns what it starts.
    Waits a bounded time for exits already under way."""
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


ONE_WORKER = {
    "tests/edge/test_hostile.py": "the edge bridge",
    "tests/edge/test_early_answer.py": "the edge bridge",
    "tests/edge/test_declared_length.py": "the edge bridge",
    "tests/edge/test_door_listener.py": "the edge bridge",
    "tests/edge/test_idle.py::test_a_real_keep_alive_connection_is_closed_when_idle": (
        "the edge bridge"
    ),
    "tests/cluster/test_forwarding.py": "the cluster of test_forwarding",
    "tests/cluster/test_signin.py": "the cluster of test_signin",
    "tests/cluster/test_stall.py": "the cluster of test_stall",
}
"""Tests that share processes started once for many of them run on one xdist worker: the
edge suite's one bridge (the session's `live`) and each module's cluster (`cluster`). Each
prefix of test ids here names its group; on other workers those tests would start the same
processes again."""
SHARED = ("live", "cluster")
"""The fixtures of those processes: a test that uses one must be in a group of `ONE_WORKER`."""

LONGEST_FIRST = (
    "tests/cluster/test_make_cluster.py::test_kill_9",
    "tests/e2e/test_load.py::test_2000",
    "tests/edge/",
    "tests/cluster/test_signin.py",
    "tests/cluster/test_forwarding.py",
    "tests/cluster/",
    "tests/keys/test_keys_service.py",
    "tests/store/test_bridge_on_postgres.py",
    "tests/store/test_import.py",
    "tests/soak/",
    "tests/browser/",
    "tests/test_children.py",
    "tests/test_cli.py::test_demo_runs_twice",
    "tests/test_parts.py::test_cli_demo",
    "tests/peers/",
    "tests/ops/test_deploy.py",
    "tests/ops/test_backup.py",
)
"""Where the tests that take longest (tens of seconds each: real processes, a cluster, a
browser) are, longest first. Under xdist they are handed out before the rest, so that no
worker takes one of them up when the others have nothing left to do."""


def group_of(nodeid: str) -> str:
    """The xdist work unit of the test `nodeid`: its `ONE_WORKER` group, or itself."""
    return next((g for prefix, g in ONE_WORKER.items() if nodeid.startswith(prefix)), nodeid)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that uses a `SHARED` fixture outside `ONE_WORKER`; on an xdist worker,
    put the longest first (`LONGEST_FIRST`; every worker sorts alike, as xdist requires)."""
    for item in items:
        shared = [f for f in SHARED if f in getattr(item, "fixturenames", ())]
        if shared and group_of(item.nodeid) == item.nodeid:
            raise pytest.UsageError(
                f"{item.nodeid} uses `{shared[0]}`, which starts processes once for many"
                " tests: add its file to ONE_WORKER in tests/conftest.py"
            )
    if hasattr(config, "workerinput"):

        def rank(item: pytest.Item) -> int:
            hits = [n for n, p in enumerate(LONGEST_FIRST) if item.nodeid.startswith(p)]
            return hits[0] if hits else len(LONGEST_FIRST)

        items.sort(key=rank)  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` with the groups of `ONE_WORKER`. pytest-xdist's own groups
    (`xdist_group` marks) rename test ids, which pytest 9.2 no longer allows: its ids are
    made from the collection tree, so those marks are silently ignored."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return Groups(config, log)
