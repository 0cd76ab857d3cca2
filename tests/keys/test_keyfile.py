"""The agent-key file under concurrent writers and when it is damaged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from ftwbridge.keys import KeysService, service
from ftwbridge.keys.keyfile import StateFileError

HOMES = 50


async def test_fifty_homes_changing_rosters_at_once(tmp_path: Path) -> None:
    path = tmp_path / "agent-keys.json"
    bridge = KeysService(path)
    cli = KeysService(path)  # `ftwbridge agent create` beside the live bridge: same file
    keys = {f"h{n}": [await bridge.create(f"h{n}") for _ in range(2)] for n in range(HOMES)}
    for home, (a, b) in keys.items():  # the owners approve both agents of every home
        await bridge.sync(home, frozenset({a, b}))
    added: list[bytes] = []

    async def create(home: str) -> None:
        added.append(await cli.create(home))

    for rnd in range(5):
        async with trio.open_nursery() as nursery:
            for home, (a, _b) in keys.items():
                # every home drops its second agent at once, while new keys are created
                nursery.start_soon(bridge.sync, home, frozenset({a}))
                if rnd % 2 == 0:
                    nursery.start_soon(create, home)
        on_disk = _on_disk(path)  # whole JSON after every round
        for home, (a, b) in keys.items():
            assert a.hex() in on_disk and b.hex() not in on_disk, (rnd, home)
        assert all(k.hex() in on_disk for k in added), rnd
        for home, (a, _b) in keys.items():  # and back: the next round drops a fresh second key
            keys[home] = [a, await bridge.create(home)]
            await bridge.sync(home, frozenset(keys[home]))
    assert _leftovers(tmp_path) == []
    assert _mode(path) == 0o600
    fresh = KeysService(path)  # what a restart reads: every listed key, no dropped one
    for a, b in keys.values():
        assert await fresh.has(a) and await fresh.has(b)


def _on_disk(path: Path) -> dict[str, object]:
    value: dict[str, object] = json.loads(path.read_text())
    return value


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize(
    "content",
    [
        b'{"ab": {"home": "h"',
        b"\xff\xfe",
        b"[1, 2]",
        b'{"zz": {"home": "h"}}',
        b"[" * 100_000 + b"]" * 100_000,  # nested past Python's recursion limit
    ],
)
def test_a_damaged_key_file_is_a_sentence(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "agent-keys.json"
    path.write_bytes(content)
    with pytest.raises(StateFileError) as info:
        KeysService(path)
    assert str(path) in str(info.value) and "agent keys" in str(info.value)


def test_serve_on_a_damaged_key_file_says_so_and_exits_2(tmp_path: Path) -> None:
    (tmp_path / "agent-keys.json").write_text('{"broken"')
    env = os.environ | {
        "FTWBRIDGE_STATE_DIR": str(tmp_path),
        "FTWBRIDGE_BIND": "127.0.0.1:0",
        "FTWBRIDGE_DOOR_BIND": "127.0.0.1:0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ftwbridge", "serve"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "agent-keys.json is not valid JSON" in done.stderr and "backup" in done.stderr


async def test_a_failed_write_is_retried_with_the_next_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A roster that drops an agent while the disk is full still forgets the key: the removal
    stays due and goes with the next write that works."""
    path = tmp_path / "agent-keys.json"
    keys = KeysService(path)
    a, b = await keys.create("h"), await keys.create("h")
    await keys.sync("h", frozenset({a, b}))
    real = service.update_json

    def full(*args: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(service, "update_json", full)
    assert await keys.sync("h", frozenset({a})) == [b]  # applied in memory, logged, kept due
    assert b.hex() in _on_disk(path)
    monkeypatch.setattr(service, "update_json", real)
    c = await keys.create("h")
    on_disk = _on_disk(path)
    assert b.hex() not in on_disk and {a.hex(), c.hex()} <= set(on_disk)
