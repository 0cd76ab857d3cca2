"""A full disk under a running bridge, as each of its users meets it (docs/operations.md, "A
full disk"): the state folder is on a small tmpfs that the test fills to the last byte, a real
file system answering ENOSPC (SQLite then says SQLITE_FULL), which is what an operator's disk
does; `PRAGMA max_page_count` would fail SQLite's writes alone and leave the keys file and the
folder writable, which no real disk does. The mount needs root; the test skips, saying so,
without it.

While the disk is full: `/readyz` and the status page say ready but degraded, in words;
`/mcp` goes on serving (nothing an assistant's call does writes the embedded store: tokens are
read, sessions need only the keys held in memory); the door takes a home's new roster, in
effect at once, and saves it once space returns; the OAuth endpoints that must write
(registration, the code exchange, a refresh) answer 503 `temporarily_unavailable` in OAuth's
form, the consent page a page in the same words; the commands that write say so in one
sentence. Once space returns, each works again with nothing lost. Requests are raw bytes.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx2
import trio

from tests.e2e.env import REAL_WAIT_S, Env, start_env
from tests.oauth.helpers import authorize_params, pkce
from tests.oauth.test_flow import REDIRECT, signed_in
from tests.ops.test_state_trouble import KEY, fill, mounted, one_sentence, run

FULL_WORDS = "the bridge's storage is full; try again later"


async def raw(env: Env, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as it stands to the bridge's main listener; (status, headers, body)."""
    return await raw_at(env.bridge.site.public_url, request)


async def raw_at(base: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as it stands to the listener at `base` (a URL); (status, headers, body)
    once the listener closes the connection."""
    url = urlsplit(base)
    with trio.fail_after(REAL_WAIT_S):
        stream = await trio.open_tcp_stream(url.hostname or "127.0.0.1", url.port or 80)
        async with stream:
            await stream.send_all(request)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body


def post(env: Env, path: str, body: bytes, content_type: str, *extra: str) -> bytes:
    host = urlsplit(env.bridge.site.public_url).netloc
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def mcp_call(env: Env, token: str) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    body["params"] = {"name": "status", "arguments": {}, "_meta": meta}
    return post(
        env,
        "/mcp",
        json.dumps(body).encode(),
        "application/json",
        f"Authorization: Bearer {token}",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2026-07-28",
        "Mcp-Method: tools/call",
        "Mcp-Name: status",
    )


def token_form(env: Env, form: dict[str, str]) -> bytes:
    return post(env, "/oauth/token", urlencode(form).encode(), "application/x-www-form-urlencoded")


async def readyz(env: Env) -> tuple[int, str]:
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.get(f"{env.bridge.admin_url}/readyz")
    return r.status_code, r.text.strip()


async def stored_seq(env: Env) -> int:
    row = await env.bridge.store.roster("h1")
    return 0 if row is None else row[0]


async def test_a_full_disk_as_each_surface_says_it(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)):
        async with trio.open_nursery() as inner:  # the bridge stops before the disk goes
            env = await start_env(inner, disk / "bridge")
            await full_then_free(env, disk)
            inner.cancel_scope.cancel()


async def full_then_free(env: Env, disk: Path) -> None:
    home = await env.add_home("h1", "--approve-all")
    key, agent_id, _token = await env.agent(home)
    fresh = await env.bridge.issue_token("h1", key, agent_id, ("ftw.live.read",))  # not cached
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        client_id, verifier, code, _url = await signed_in(env, home, http)
        form = {
            "grant_type": "authorization_code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
            "resource": env.url,
        }
        status, _, body = await raw(env, token_form(env, form | {"code": code}))
        assert status == 200, body
        refresh = json.loads(body)["refresh_token"]
        client_id2, verifier2, code2, _url = await signed_in(env, home, http)
    later = form | {"client_id": client_id2, "code_verifier": verifier2, "code": code2}
    again = {"grant_type": "refresh_token", "refresh_token": refresh, "client_id": client_id}
    assert await readyz(env) == (200, "ready")
    seq = await stored_seq(env)

    await trio.to_thread.run_sync(fill, disk)
    said = await while_full(env, home, fresh, later, again, agent_id)
    assert await stored_seq(env) == seq  # the new roster is not on the disk

    for name in ("filler", "filler-small"):
        (disk / name).unlink()
    await after_space_returns(env, seq + 1, later, again, agent_id)
    assert said


async def while_full(
    env: Env, home: Any, fresh: str, later: dict[str, str], again: dict[str, str], agent: str
) -> list[str]:
    said = []
    status, text = await readyz(env)
    assert status == 200 and text.startswith("ready, degraded: the disk holding the state"), text
    assert "is full (0 KiB free)" in text and "free space there" in text, text
    said.append(text)
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:  # the operator's status page
        page = (await http.get(f"{env.bridge.admin_url}/")).text
        metrics = (await http.get(f"{env.bridge.admin_url}/metrics")).text
    assert "\nftwbridge_state_disk_free_bytes 0.0\n" in metrics  # what the alert rule reads
    assert '<p class="warn">ready, degraded: the disk holding the state folder' in page, page
    # an assistant's call: the token is read from the store, the box answers as ever
    status, _, body = await raw(env, mcp_call(env, fresh))
    answer = json.loads(body)
    assert status == 200 and answer["result"]["isError"] is False, body
    assert "fields" in answer["result"]["structuredContent"]
    # the owner approves an assistant at home: the door takes the roster, in effect at once
    new = secrets.token_bytes(32)
    agent_row = {"op": "put_agent", "key": new.hex(), "id": "agent-later", "client": "demo"}
    agent_row |= {"name": "Later", "scopes": ["ftw.live.read"], "ops": [], "caps": {}}
    await home.console(**agent_row, expiresAtMs=env.bridge.clock() + 3_600_000)
    with trio.fail_after(REAL_WAIT_S):
        await env.bridge.door.wait_roster("h1", lambda r: new in r.agents())
    # what must write answers in OAuth's form, and leaks nothing
    for request in (
        token_form(env, later),
        token_form(env, again),
        post(
            env,
            "/oauth/register",
            json.dumps({"redirect_uris": [REDIRECT]}).encode(),
            "application/json",
        ),
    ):
        status, headers, body = await raw(env, request)
        assert status == 503 and headers["content-type"].startswith("application/json"), body
        assert json.loads(body) == {
            "error": "temporarily_unavailable",
            "error_description": FULL_WORDS,
        }
        assert headers["cache-control"] == "no-store"
        said.append(FULL_WORDS)
    # the person at the consent page, for a client registered before: a page in those words
    params = authorize_params(later["client_id"], REDIRECT, pkce()[1]) | {"resource": env.url}
    host = urlsplit(env.bridge.site.public_url).netloc
    status, headers, body = await raw(
        env,
        f"GET /authorize?{urlencode(params)} HTTP/1.1\r\nHost: {host}\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    assert status == 503 and headers["content-type"].startswith("text/html"), body
    assert b"storage is full; try again later" in body and b"Traceback" not in body
    # the commands: what writes says so in one sentence; what reads works
    state = Path(env.bridge.config.state_dir)
    for argv in (
        ("token", "issue", "--home", "h1", "--agent", agent),
        ("home", "enroll", "--home", "h2", "--key", "cd" * 32),
        ("agent", "create", "--home", "h1"),
    ):
        line = one_sentence(await trio.to_thread.run_sync(lambda a=argv: run(state, *a)))
        assert f"the disk holding the state folder {state} is full" in line, line
        assert "free space there or give it a larger volume" in line, line
        assert "damaged" not in line and "restore" not in line, line
        said.append(line)
    listed = await trio.to_thread.run_sync(lambda: run(state, "home", "list"))
    assert listed.returncode == 0 and listed.stdout.startswith("h1  key "), listed.stderr
    return said


async def after_space_returns(
    env: Env, seq: int, later: dict[str, str], again: dict[str, str], agent: str
) -> None:
    assert await readyz(env) == (200, "ready")
    # the roster taken on the full disk is saved with no word from the box: by the applier's
    # next try within RETRY_S (tests/pool/test_applier.py), or at once when asked, as here
    assert env.bridge.door.rosters_unsaved == 1
    with trio.fail_after(REAL_WAIT_S):
        await env.bridge.door.rosters_saved()
    assert await stored_seq(env) == seq
    for request in (token_form(env, later), token_form(env, again)):
        status, _, body = await raw(env, request)
        assert status == 200 and json.loads(body)["token_type"] == "Bearer", body
    state = Path(env.bridge.config.state_dir)
    done = await trio.to_thread.run_sync(
        lambda: run(state, "token", "issue", "--home", "h1", "--agent", agent)
    )
    assert done.returncode == 0, done.stderr
    assert os.listdir(state)  # the state is there, as it was


def test_a_backup_onto_the_full_disk_says_so_and_one_to_another_disk_works(
    tmp_path: Path,
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)):
        state = disk / "state"
        assert run(state, "home", "enroll", "--home", "h0", "--key", KEY).returncode == 0
        fill(disk)
        line = one_sentence(run(state, "db", "backup", "--to", str(disk / "backup")))
        assert f"the disk holding the backup folder {disk / 'backup'} is full" in line, line
        assert "back up to a folder on another disk" in line and "damaged" not in line, line
        done = run(state, "db", "backup", "--to", str(tmp_path / "elsewhere"))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "elsewhere" / "bridge.sqlite").is_file()
