"""What a pool test starts with: `rig` (door, pool and keys part, started), `stub` (home "h1",
online at the rig's door) and `agent` (the key of an agent granted every read there for an hour).

A test says what differs from the defaults with markers: `@pytest.mark.config(queue_per_home=4)`
gives the rig `Config(queue_per_home=4)`; `@pytest.mark.stub(answer_delay_ms=2000)` gives the
arguments of home "h1" (or parametrize `stub` with them, `indirect=["stub"]`). A test that needs
another rig (a skewed bridge clock, another door or store) builds its own `Rig`.

The rig runs on MockClock with autojump. pytest-trio takes the clock from the test's own
arguments, so each test names `autojump_clock`; `rig` refuses to start without it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from ftwbridge.config import Config
from stubbox.uplink import StubHome
from tests.harness import Rig


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stub(**args): arguments of the `stub` fixture's home")


@pytest.fixture
async def rig(nursery: trio.Nursery, request: pytest.FixtureRequest) -> Rig:
    """Door, pool and keys part, started; `Config` fields from `@pytest.mark.config`."""
    clock = trio.lowlevel.current_clock()
    if not (isinstance(clock, MockClock) and clock.autojump_threshold == 0):
        pytest.fail("a test with `rig` names `autojump_clock` among its arguments")
    marker = request.node.get_closest_marker("config")
    r = Rig(nursery, Config(**marker.kwargs) if marker else Config())
    await r.start()
    return r


@pytest.fixture
async def stub(rig: Rig, request: pytest.FixtureRequest) -> StubHome:
    """Home "h1" online at the rig's door; arguments from `@pytest.mark.stub` or a parameter."""
    args: dict[str, Any] | None = getattr(request, "param", None)
    if args is None:
        marker = request.node.get_closest_marker("stub")
        args = marker.kwargs if marker else {}
    return await rig.add_home("h1", **args)


@pytest.fixture
async def agent(rig: Rig, stub: StubHome) -> bytes:
    """The key of an agent granted every read at `stub` for an hour."""
    key, _ = await rig.grant(stub)
    return key
