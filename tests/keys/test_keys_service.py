"""The keys service as an operator runs it (docs/architecture.md, "What runs where"): real processes on 127.0.0.1 and
a throwaway PostgreSQL. Two `ftwbridge keys --listen` on one database holding the agents' keys
sealed under one `kek`; a bridge (`serve`, no `kek`) reaching one of them over TCP with the
mesh key; a stub home; the official `mcp` client reading `status`. A key made through one keys
service serves sessions through the other, and through a restarted one; a bridge with another
mesh key is refused in one sentence on both sides. Every wait is bounded (`BOUND_S`)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import trio

from devtools.rig import console, start_stub
from devtools.rig import home_key as stub_key
from ftwbridge.keys.mesh import WRONG_KEY
from ftwbridge.keys.remote import RemoteKeys
from ftwbridge.proto.noise import generate_static
from tests.store.conftest import first_line
from tests.store.test_bridge_on_postgres import _command, _env, _status
from tests.test_cli import _free_port, ftwbridge, refused

BOUND_S = 90.0
"""Bound on the whole scenario (a loaded machine): a bound, not a measure."""
HOME = "keys-home"
MESH = bytes(range(32))
KEK = bytes(range(100, 132))
ME = [sys.executable, "-m", "ftwbridge"]


async def _keys_service(
    nursery: trio.Nursery, env: dict[str, str], address: str = "127.0.0.1:0"
) -> tuple[trio.Process, tuple[str, int]]:
    """`ftwbridge keys --listen ADDRESS`; returns the process and where it listens."""
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            [*ME, "keys", "--listen", address],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    )
    assert proc.stdout is not None
    line = b""
    while b"\n" not in line:
        chunk = await proc.stdout.receive_some(4096)
        assert chunk, "the keys service exited before it started"
        line += chunk
    url = line.split(b"\n", 1)[0].decode().removeprefix("keys service on tcp://")
    host, port = url.rsplit(":", 1)
    return proc, (host, int(port))


async def _stderr_until(proc: trio.Process, words: str) -> str:
    """The keys service's stderr, read until it holds `words`."""
    assert proc.stderr is not None
    out = ""
    while words not in out:
        chunk = await proc.stderr.receive_some(4096)
        assert chunk, out
        out += chunk.decode()
    return out


async def test_bridges_reach_sealed_keys_through_keys_services(pg_url: str, tmp_path: Path) -> None:
    port, door_port = _free_port(), _free_port()
    keys_env = _env(
        database_url=pg_url, kek=KEK.hex(), mesh_key=MESH.hex(), state_dir=str(tmp_path / "k")
    )
    with trio.fail_after(BOUND_S):
        home_key = (await stub_key(HOME))["homeKey"]
        async with trio.open_nursery() as nursery:
            first, at_first = await _keys_service(nursery, keys_env)
            _second, at_second = await _keys_service(nursery, keys_env)
            bridge_env = _env(
                database_url=pg_url,
                keys_url=f"tcp://127.0.0.1:{at_first[1]}",
                mesh_key=MESH.hex(),
                state_dir=str(tmp_path / "bridge"),
                bind=f"127.0.0.1:{port}",
                door_bind=f"127.0.0.1:{door_port}",
                public_url=f"http://127.0.0.1:{port}",
                admin_bind="none",
            )
            enrolled = await _command(
                "home", "enroll", "--home", HOME, "--key", home_key, env=bridge_env
            )
            assert enrolled.returncode == 0, enrolled
            line = await first_line(nursery, [*ME, "serve", "--exit-with-parent"], bridge_env)
            url = line.removeprefix("ftwbridge serving ")
            door = f"ws://127.0.0.1:{door_port}/v1/box"  # the door's own listener
            _stub, stub_line = await start_stub(nursery, door, home=HOME)
            # the agent's key is made through the second keys service ...
            second_env = bridge_env | {"FTWBRIDGE_KEYS_URL": f"tcp://127.0.0.1:{at_second[1]}"}
            created = await _command("agent", "create", "--home", HOME, env=second_env)
            assert created.returncode == 0, created
            agent_key = created.stdout.decode().strip()
            await console(stub_line["console"], _agent_row(agent_key))
            issued = await _command(  # the roster reaches PostgreSQL through the bridge
                "token", "issue", "--home", HOME, "--agent", "a1", "--wait", "60", env=bridge_env
            )
            assert issued.returncode == 0, issued
            token = issued.stdout.decode().strip()
            # ... and the bridge opens the session through the first
            result = await _status(url, token)
            assert not result.is_error, result
            assert "pv_w" in json.dumps(result.structured_content)
            assert not list((tmp_path / "bridge").glob("agent-keys*"))  # no key at the bridge
            # the first keys service restarts on its port: it serves the agent from the store
            first.terminate()
            await first.wait()
            _again, again = await _keys_service(nursery, keys_env, f"127.0.0.1:{at_first[1]}")
            assert again == at_first
            await _begins(again, bytes.fromhex(agent_key))
            await _begins(at_second, bytes.fromhex(agent_key))
            await console(stub_line["console"], {"op": "drop_uplink"})  # sessions end
            for _attempt in range(300):  # the box redials with backoff; then a new session
                result = await _status(url, token)
                if not result.is_error:
                    break
                await trio.sleep(0.1)
            assert not result.is_error, result
            nursery.cancel_scope.cancel()


def _agent_row(agent_key: str) -> dict[str, object]:
    return {
        "op": "put_agent",
        "key": agent_key,
        "id": "a1",
        "client": "test",
        "name": "Test assistant",
        "scopes": ["ftw.live.read"],
        "ops": [],
        "caps": {},
        "expiresAtMs": 10**13,
    }


async def _begins(address: tuple[str, int], agent_key: bytes) -> None:
    """A handshake for `agent_key` begins at the keys service at `address`."""
    keys = RemoteKeys([address], MESH)
    try:
        handle, m1 = await keys.begin(agent_key, generate_static()[1])
        assert len(m1) > 32
        await keys.abort(handle)
    finally:
        await keys.aclose()


async def test_a_bridge_with_another_mesh_key_is_refused_in_one_sentence(
    pg_url: str, tmp_path: Path
) -> None:
    keys_env = _env(
        database_url=pg_url, kek=KEK.hex(), mesh_key=MESH.hex(), state_dir=str(tmp_path / "k")
    )
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            service, (_host, port) = await _keys_service(nursery, keys_env)
            wrong = _env(
                keys_url=f"tcp://127.0.0.1:{port}",
                mesh_key=bytes(32).hex(),
                state_dir=str(tmp_path / "bridge"),
            )
            result = await trio.to_thread.run_sync(
                functools.partial(
                    ftwbridge, "agent", "create", "--home", HOME, cwd=tmp_path, env=wrong
                )
            )
            refused(
                result,
                f"the keys service at tcp://127.0.0.1:{port} refused this bridge: {WRONG_KEY}",
                "change mesh_key in the config file (or FTWBRIDGE_MESH_KEY)",
            )
            said = await _stderr_until(service, WRONG_KEY)
            assert "keys service refused 127.0.0.1:" in said and "Traceback" not in said
            # a bridge that serves with it says so at start, and is not ready
            serving = wrong | {
                "FTWBRIDGE_BIND": "127.0.0.1:0",
                "FTWBRIDGE_ADMIN_BIND": "none",
                "FTWBRIDGE_DOOR_BIND": "127.0.0.1:0",
            }
            bridge: trio.Process = await nursery.start(
                functools.partial(
                    trio.run_process,
                    [*ME, "serve", "--exit-with-parent"],
                    env=serving,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
            logged = await _stderr_until(bridge, WRONG_KEY)
            assert "not ready: the keys part does not answer (the keys service at" in logged
            assert "refused this bridge" in logged and "Traceback" not in logged
            nursery.cancel_scope.cancel()


def test_the_keys_settings_are_refused_in_one_sentence_where_they_do_not_fit(
    tmp_path: Path,
) -> None:
    listen = ("keys", "--listen", "127.0.0.1:0")
    refused(ftwbridge(*listen, cwd=tmp_path, env=_env()), "mesh_key is not set")
    no_kek = _env(mesh_key=MESH.hex(), database_url="postgresql://u@127.0.0.1:1/x")
    refused(ftwbridge(*listen, cwd=tmp_path, env=no_kek), "kek is not set", "FTWBRIDGE_KEK")
    bridge_kek = _env(kek=KEK.hex(), admin_bind="none")
    sentence = refused(
        ftwbridge("serve", cwd=tmp_path, env=bridge_kek), "only keys services", "remove it"
    )
    assert KEK.hex() not in sentence
    bad = _env(mesh_key="not a key")
    assert "not a key" not in refused(ftwbridge(*listen, cwd=tmp_path, env=bad), "mesh_key must be")
    refused(
        ftwbridge(*listen[:2], "nowhere", cwd=tmp_path, env=_env(mesh_key=MESH.hex())),
        "--listen must be host:port",
    )


def test_keys_url_needs_the_mesh_key(tmp_path: Path) -> None:
    env = _env(keys_url="tcp://127.0.0.1:9", admin_bind="none")
    refused(ftwbridge("serve", cwd=tmp_path, env=env), "keys_url is set but mesh_key is not")
