"""Shared fixtures: the contract's test vectors."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


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
