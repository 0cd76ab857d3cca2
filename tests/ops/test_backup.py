"""Backups and restores of the embedded state, end to end: a bridge process with a stub home,
an agent and its token; `ftwbridge db backup` while it serves; the bridge stopped and its state
folder lost; `ftwbridge db restore` into a new folder and a bridge on it; the old token and the
agent's key work again (a `status` call through a Noise session to the box). Then the refusals:
a backup over a non-empty folder, a damaged or forged backup, a restore under a running bridge,
and PostgreSQL, which has its own tools."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import trio

from devtools.rig import console, free_port, home_key, start_stub
from ftwbridge.backup import backup_state, restore_state
from ftwbridge.lifecycle import StartupError
from ftwbridge.store.inuse import serving_state
from tests.e2e.env import REAL_WAIT_S
from tests.e2e.test_access import MODERN, call_body

CLI = [sys.executable, "-m", "ftwbridge"]


async def cli(env: dict[str, str], *argv: str) -> str:
    done = await trio.run_process(
        [*CLI, *argv], capture_stdout=True, capture_stderr=True, env=env, check=False
    )
    assert done.returncode == 0, (argv, done.stderr.decode())
    return done.stdout.decode()


async def serve(nursery: trio.Nursery, env: dict[str, str]) -> trio.Process:
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            [*CLI, "serve", "--exit-with-parent"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            check=False,
        )
    )
    assert proc.stdout is not None
    seen = b""
    while b"ftwbridge serving" not in seen:
        chunk = await proc.stdout.receive_some(4096)
        assert chunk, seen
        seen += chunk
    return proc


async def status_call(url: str, token: str) -> dict[str, object]:
    headers = MODERN | {"mcp-method": "tools/call", "mcp-name": "status"}
    headers["authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.post(url, content=json.dumps(call_body("status")), headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["result"]  # type: ignore[no-any-return]


async def stop(proc: trio.Process) -> None:
    proc.terminate()  # SIGTERM: the bridge drains and exits
    with trio.fail_after(REAL_WAIT_S):
        assert await proc.wait() == 0


async def test_a_restored_state_serves_the_old_token_and_agent(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    port, door_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    state, saved, after = tmp_path / "state", tmp_path / "backup", tmp_path / "restored"
    base = os.environ | {
        "FTWBRIDGE_BIND": f"127.0.0.1:{port}",
        "FTWBRIDGE_ADMIN_BIND": "none",
        "FTWBRIDGE_DOOR_BIND": f"127.0.0.1:{door_port}",
        "FTWBRIDGE_PUBLIC_URL": url,
    }
    env = base | {"FTWBRIDGE_STATE_DIR": str(state)}
    key_line = await home_key("h1")
    await cli(env, "home", "enroll", "--home", "h1", "--key", key_line["homeKey"])
    first = await serve(nursery, env)
    stub, line = await start_stub(nursery, f"ws://127.0.0.1:{door_port}/v1/box", home="h1")
    agent_key = (await cli(env, "agent", "create", "--home", "h1")).strip()
    await console(
        line["console"],
        {
            "home": "h1",
            "op": "put_agent",
            "key": agent_key,
            "id": "a1",
            "name": "Backed up",
            "scopes": ["ftw.live.read"],
            "expiresAtMs": int(time.time() * 1000) + 3_600_000,
        },
    )
    with trio.fail_after(REAL_WAIT_S):
        token = (
            await cli(env, "token", "issue", "--home", "h1", "--agent", "a1", "--wait", "60")
        ).strip()
        assert not (await status_call(url + "/mcp", token))["isError"]
    said = await cli(env, "db", "backup", "--to", str(saved))  # online: the bridge serves
    assert said.startswith(f"backed up {state} to {saved}: bridge.sqlite ")
    assert "agent-keys.json" in said
    assert sorted(p.name for p in saved.iterdir()) == [
        "agent-keys.json",
        "backup.json",
        "bridge.sqlite",
    ]
    await stop(first)
    shutil.rmtree(state)  # the disaster
    env = base | {"FTWBRIDGE_STATE_DIR": str(after)}
    restored = await cli(env, "db", "restore", "--from", str(saved))
    assert f"restored {after / 'bridge.sqlite'}" in restored
    second = await serve(nursery, env)
    with trio.fail_after(REAL_WAIT_S):
        while True:  # the stub home redials with its backoff (0.5 s doubling)
            result = await status_call(url + "/mcp", token)
            if not result["isError"]:
                break
            assert "offline" in json.dumps(result), result
            await trio.sleep(0.5)
    agents = await cli(env, "agent", "list", "--home", "h1")
    assert "a1  'Backed up'" in agents
    await stop(second)
    stub.terminate()


def make_state(folder: Path) -> None:
    from ftwbridge.keys.keyfile import write_json_atomic
    from ftwbridge.store.sqlite import SqliteStore

    SqliteStore(folder / "bridge.sqlite").close()
    write_json_atomic(folder / "agent-keys.json", {"keys": []})


def test_the_refusals_are_one_sentence_each(tmp_path: Path) -> None:
    state = tmp_path / "state"
    make_state(state)
    with pytest.raises(StartupError, match="no bridge state is in"):
        backup_state(tmp_path / "none", tmp_path / "b0", 0)
    taken = tmp_path / "b1"
    backup_state(state, taken, 0)
    with pytest.raises(StartupError, match="is not empty; name a new folder"):
        backup_state(state, taken, 0)
    # a restore under a running bridge is refused, and changes nothing
    with serving_state(state), pytest.raises(StartupError, match="a bridge is running on"):
        restore_state(taken, state, 1)
    assert not list(state.glob("*.before-restore-*"))
    # what was there is moved aside
    said = restore_state(taken, state, 2)
    assert any("moved" in line and "before-restore-2000" in line for line in said)
    # a damaged file, a forged manifest, no manifest
    (taken / "bridge.sqlite").write_bytes(b"damaged")
    with pytest.raises(StartupError, match="SHA-256"):
        restore_state(taken, state, 3)
    forged = tmp_path / "b2"
    backup_state(state, forged, 0)
    manifest = json.loads((forged / "backup.json").read_text())
    manifest["files"]["../../escape"] = manifest["files"]["bridge.sqlite"]
    (forged / "backup.json").write_text(json.dumps(manifest))
    with pytest.raises(StartupError, match=r"must name bridge\.sqlite and at most"):
        restore_state(forged, state, 4)
    with pytest.raises(StartupError, match="holds no backup"):
        restore_state(tmp_path, state, 5)


def test_postgres_is_pointed_at_its_own_tools(tmp_path: Path) -> None:
    env = os.environ | {"FTWBRIDGE_DATABASE_URL": "postgresql://u@127.0.0.1:9/x"}
    for argv in (
        ["db", "backup", "--to", str(tmp_path / "b")],
        ["db", "restore", "--from", str(tmp_path)],
    ):
        done = subprocess.run(
            [*CLI, *argv], capture_output=True, text=True, env=env, timeout=60, check=False
        )
        assert done.returncode == 2 and "docs/operations.md says under 'Backups'" in done.stderr
        assert done.stderr.count("\n") == 1
