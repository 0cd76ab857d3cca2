"""The whole bridge on PostgreSQL, as an operator runs it: `ftwbridge db migrate`, `home
enroll`, `serve`, `agent create` and `token issue` as processes sharing one
`database_url`, a stub home dialing the door, and the official `mcp` client reading `status`.
The command line's refusals about the database are one sentence each, with no password.
Every wait is bounded (`BOUND_S`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, overload

import trio

from devtools.rig import console, start_stub
from devtools.rig import home_key as stub_key
from ftwbridge.store.migrate import bundled
from ftwbridge.store.postgres import PgStore
from tests.store.conftest import first_line
from tests.test_cli import _free_port, ftwbridge, refused

BOUND_S = 60.0
"""Bound on each process's first line and each step's wait, seconds (a loaded machine)."""
SCENARIO_S = 180.0
"""Bound on the whole bridge's scenario on PostgreSQL, seconds: its seven processes and a
database outage took 42 s with two busy loops beside a machine already loaded (2026-12-01),
70 % of the 60 s it had; a bound, never a measurement."""
HOME = "pg-home"


def _env(**settings: str) -> dict[str, str]:
    """The environment without the caller's `FTWBRIDGE_*`, the door's own listener on a port
    the kernel picks (unless `door_bind` is given), and `settings` as `FTWBRIDGE_*`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTWBRIDGE_")}
    env.update(
        {"FTWBRIDGE_" + k.upper(): v for k, v in ({"door_bind": "127.0.0.1:0"} | settings).items()}
    )
    return env


async def _command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """`python -m ftwbridge ARGS` to its end, without blocking trio."""
    return await trio.run_process(
        [sys.executable, "-m", "ftwbridge", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


def test_the_command_line_says_in_one_sentence_what_is_wrong_with_the_database(
    tmp_path: Path,
) -> None:
    port = _free_port()  # nothing listens there
    env = _env(database_url=f"postgresql://ftw:hunter2@127.0.0.1:{port}/ftw", admin_bind="none")
    sentence = refused(
        ftwbridge("serve", cwd=tmp_path, env=env),
        f"PostgreSQL database ftw at 127.0.0.1:{port} does not answer",
        "change database_url",
    )
    assert "hunter2" not in sentence
    refused(
        ftwbridge("db", "migrate", cwd=tmp_path, env=_env()),
        "database_url is not set",
        "FTWBRIDGE_DATABASE_URL",
    )


async def test_the_whole_bridge_on_postgres(pg_url: str, tmp_path: Path) -> None:
    port = _free_port()  # `token issue` binds its token to the resource the bridge serves
    door_port = _free_port()
    env = _env(
        database_url=pg_url,
        state_dir=str(tmp_path / "state"),
        bind=f"127.0.0.1:{port}",
        door_bind=f"127.0.0.1:{door_port}",
        public_url=f"http://127.0.0.1:{port}",
        admin_bind="none",
    )
    with trio.fail_after(SCENARIO_S):
        home_key = (await stub_key(HOME))["homeKey"]
        migrated = await _command("db", "migrate", env=env)
        names = [m.name for m in bundled()]
        assert migrated.stdout.decode().splitlines() == [f"applied {n}" for n in names], migrated
        enrolled = await _command("home", "enroll", "--home", HOME, "--key", home_key, env=env)
        assert enrolled.stdout == f"enrolled {HOME}\n".encode(), enrolled
        async with trio.open_nursery() as nursery:
            me = [sys.executable, "-m", "ftwbridge"]
            line = await first_line(nursery, [*me, "serve", "--exit-with-parent"], env)
            url = line.removeprefix("ftwbridge serving ")
            door = f"ws://127.0.0.1:{door_port}/v1/box"  # the door's own listener
            _stub, stub_line = await start_stub(nursery, door, home=HOME)
            # the key file in state_dir, which the bridge's in-process keys part picks up
            created = await _command("agent", "create", "--home", HOME, env=env)
            assert created.returncode == 0, created
            agent_key = created.stdout.decode().strip()
            await console(
                stub_line["console"],
                {
                    "op": "put_agent",
                    "key": agent_key,
                    "id": "agent-pg",
                    "client": "test",
                    "name": "Test assistant",
                    "scopes": ["ftw.live.read"],
                    "ops": [],
                    "caps": {},
                    "expiresAtMs": 10**13,
                },
            )
            # `token issue` reads the roster from PostgreSQL, where the bridge's roster applier
            # puts it soon after the box sent it: `--wait` is woken by the roster's event
            issued = await _command(
                "token", "issue", "--home", HOME, "--agent", "agent-pg", "--wait", "60", env=env
            )
            assert issued.returncode == 0, issued
            token = issued.stdout.decode().strip()
            result = await _status(url, token)
            assert not result.is_error, result
            assert result.structured_content is not None and "pv_w" in json.dumps(
                result.structured_content
            )
            # another instance revokes the agent: this one drops its cached token at once
            # (the event), where its cache alone would keep honouring it for 30 s
            assert await _raw_call(url, token) != 401
            other = PgStore(pg_url)
            await other.start()
            try:
                assert await other.drop_agent_tokens(HOME, bytes.fromhex(agent_key)) == 1
            finally:
                other.close()
            for _attempt in range(100):
                if await _raw_call(url, token) == 401:
                    break
                await trio.sleep(0.05)
            else:
                raise AssertionError("the revoked token was still honoured after 5 s")
            # the database goes away: what needs it is refused in words, the bridge lives on
            await trio.to_thread.run_sync(_allow_connections, pg_url, False)
            status, body = await _raw_call(url, token, body=True)
            assert status == 503, body
            assert body["error"]["code"] == -32603
            assert "database does not answer" in body["error"]["message"]
            await trio.to_thread.run_sync(_allow_connections, pg_url, True)
            for _attempt in range(150):  # the pool makes its connections again
                if (status := await _raw_call(url, token)) != 503:
                    break
                await trio.sleep(0.2)
            assert status == 401
            nursery.cancel_scope.cancel()


def _allow_connections(url: str, allowed: bool) -> None:
    """Let no one connect to `url`'s database and end its sessions (an outage), or undo it."""
    import psycopg

    admin, name = url.rsplit("/", 1)
    with psycopg.connect(admin + "/postgres", autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS {str(allowed).lower()}")
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )


@overload
async def _raw_call(url: str, token: str) -> int: ...
@overload
async def _raw_call(url: str, token: str, *, body: Literal[True]) -> tuple[int, Any]: ...
async def _raw_call(url: str, token: str, *, body: bool = False) -> int | tuple[int, Any]:
    """The HTTP status (and with `body`, the JSON answer) of one `tools/list` POST, sent
    raw."""
    import httpx2

    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:
        response = await http.post(
            url,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-11-25",
            },
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        status = int(response.status_code)
        return (status, response.json()) if body else status


async def _status(url: str, token: str) -> object:
    """One `status` call by the official `mcp` client, 2026-07-28 era."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c:
        return await c.call_tool("status", {})


async def test_the_waiting_page_keeps_polling_through_an_outage(
    pg_url: str, tmp_path: Path
) -> None:
    """The person's browser polls `/authorize/wait` (a page that reloads itself), and every
    poll reads the database when it is PostgreSQL. While the database does not answer, the
    poll is answered by a page in words that reloads itself too, so the sign-in carries on
    by itself once the database is back; a JSON body would end the reloading for good."""
    import httpx2

    from ftwbridge.config import Config
    from ftwbridge.run import Bridge

    port = _free_port()
    config = Config(
        database_url=pg_url,
        state_dir=tmp_path,
        bind=f"127.0.0.1:{port}",
        public_url=f"http://127.0.0.1:{port}",
        admin_bind=None,
        door_bind="127.0.0.1:0",
    )
    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(Bridge(config).serve)
            url = f"http://127.0.0.1:{port}/authorize/wait?req=r1"
            async with httpx2.AsyncClient(timeout=BOUND_S) as http:
                assert (await http.get(url)).status_code == 400  # unknown: a page, as always
                await trio.to_thread.run_sync(_allow_connections, pg_url, False)
                try:
                    resp = await http.get(url)
                finally:
                    await trio.to_thread.run_sync(_allow_connections, pg_url, True)
            assert resp.status_code == 503 and resp.headers["retry-after"]
            assert resp.headers["content-type"].startswith("text/html")
            assert "database does not answer" in resp.text
            assert '<meta http-equiv="refresh"' in resp.text
            nursery.cancel_scope.cancel()
