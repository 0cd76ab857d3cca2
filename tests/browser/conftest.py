"""Fixtures for the end-to-end tests: a bridge on a real port, stub homes in processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.e2e.env import Env, start_env


@pytest.fixture
async def env(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Env]:
    e = await start_env(nursery, tmp_path)
    yield e
    nursery.cancel_scope.cancel()
