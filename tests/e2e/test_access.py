"""Who may read what, over real sockets: tokens, homes, rosters, scopes, boxes that refuse."""

from __future__ import annotations

import functools
import json
import subprocess
from typing import Any

import trio

from ftwbridge.store import TokenRecord, hash_token

from .env import REAL_WAIT_S, Env

MODERN = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call_body(name: str, arguments: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments or {}, "_meta": META},
    }


async def post_call(
    env: Env, token: str | None, name: str, arguments: dict[str, Any] | None = None
) -> Any:
    headers = MODERN | {"mcp-method": "tools/call", "mcp-name": name}
    async with env.http(token) as http:
        return await http.post(
            env.url, content=json.dumps(call_body(name, arguments)), headers=headers
        )


async def test_missing_and_unknown_tokens_get_401_with_metadata(env: Env) -> None:
    for token in (None, "not-a-token"):
        r = await post_call(env, token, "status")
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        assert (
            challenge.startswith("Bearer ")
            and f'resource_metadata="{env.bridge.site.metadata_url}"' in challenge
        )
    async with env.http() as http:
        meta = (await http.get(env.bridge.site.metadata_url)).json()
    assert meta["resource"] == env.url and "ftw.live.read" in meta["scopes_supported"]


async def test_token_for_one_home_is_refused_at_another(env: Env) -> None:
    h1 = await env.add_home("h1")
    await env.add_home("h2")
    key, agent_id, _token = await env.agent(h1)
    # A token naming home h2 with h1's agent key: h2's roster does not list it.
    forged = "forged-token"
    record = TokenRecord(
        "h2", agent_id, key, ("ftw.live.read",), env.url, "test", env.bridge.clock() + 60_000
    )
    await env.bridge.store.put_token(hash_token(forged), record)
    r = await post_call(env, forged, "status")
    assert r.status_code == 401


async def test_roster_drop_gives_401_and_keys_part_forgets(env: Env) -> None:
    home = await env.add_home("h1")
    key, _agent, token = await env.agent(home)
    r = await post_call(env, token, "status")
    assert r.status_code == 200 and not r.json()["result"]["isError"]
    await home.console(op="drop_agent", key=key.hex())
    with trio.fail_after(REAL_WAIT_S):
        await env.bridge.door.wait_roster("h1", lambda ro: key not in ro.agents())
    r = await post_call(env, token, "status")
    assert r.status_code == 401  # in effect at once; the keys part and the store follow:
    assert "withdrawn" in r.json()["error_description"]
    with trio.fail_after(REAL_WAIT_S):
        await env.bridge.door.rosters_saved()
    assert not await env.bridge.keys.has(key)
    record = await env.bridge.store.token(hash_token(token))
    assert record is not None and record.withdrawn  # kept only to say why
    r = await post_call(env, token, "status")
    assert r.status_code == 401 and "withdrawn" in r.headers["www-authenticate"]
    assert env.bridge.pool.statistics().sessions == 0


async def test_a_grant_that_ran_out_gets_a_401_that_says_so(env: Env) -> None:
    home = await env.add_home("h1")
    key, _agent, token = await env.agent(home, ttl_ms=1500)
    roster = await env.bridge.door.roster("h1")
    assert roster is not None
    await trio.sleep((roster.agents()[key].expires_at_ms - env.bridge.clock()) / 1000 + 0.1)
    r = await post_call(env, token, "status")  # the grant's expiresAtMs is wall-clock time
    assert r.status_code == 401
    assert "run out" in r.json()["error_description"]
    assert 'error="invalid_token"' in r.headers["www-authenticate"]


async def test_missing_scope_is_403_insufficient_scope(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home, scopes=["ftw.live.read"])
    r = await post_call(env, token, "history_query", {"range": "6h"})
    assert r.status_code == 403
    assert 'error="insufficient_scope"' in r.headers["www-authenticate"]
    assert 'scope="ftw.history.read"' in r.headers["www-authenticate"]
    assert r.json()["id"] == 1 and "ftw.history.read" in r.json()["error"]["message"]
    assert (await post_call(env, token, "status")).status_code == 200


async def test_box_without_noise_says_it_takes_no_assistants(env: Env) -> None:
    home = await env.add_home("h1", "--no-noise")
    _key, _agent, token = await env.agent(home)
    r = await post_call(env, token, "status")
    result = r.json()["result"]
    assert result["isError"] and result["_meta"]["ftwbridge/error"]["code"] == "E_UNAVAILABLE"
    assert "does not take assistants yet" in result["content"][0]["text"]


async def test_box_without_clock_says_so_at_once(env: Env) -> None:
    home = await env.add_home("h1", "--clock", "none")
    _key, _agent, token = await env.agent(home)
    start = trio.current_time()
    r = await post_call(env, token, "status")
    assert trio.current_time() - start < env.bridge.config.handshake_s
    text = r.json()["result"]["content"][0]["text"]
    assert text.startswith("E_UNAVAILABLE") and "no clock" in text


async def test_refusal_in_words_with_retry(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    r = await post_call(env, token, "config_get", {"section": "site", "extra": 1})
    result = r.json()["result"]
    assert (
        result["isError"] and "not valid" in result["content"][0]["text"]
    )  # unknown field refused
    r = await post_call(env, token, "diag_run", {"check": "driver", "src": "nope"})
    result = r.json()["result"]
    assert (
        result["isError"]
        and result["content"][0]["text"]
        == "E_NOT_FOUND: The home has no driver or device called 'nope'."
    )


async def test_box_disconnect_mid_call_ends_in_words(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    assert (await post_call(env, token, "status")).status_code == 200
    await home.console(op="hold", on=True)
    async with trio.open_nursery() as inner:
        got: list[Any] = []

        async def caller() -> None:
            got.append(await post_call(env, token, "status"))

        inner.start_soon(caller)
        with trio.fail_after(REAL_WAIT_S):
            while env.bridge.pool.statistics().calls_in_flight == 0:  # noqa: ASYNC110 - real sockets, bounded
                await trio.sleep(0.01)
        await home.console(op="drop_uplink")
    result = got[0].json()["result"]
    assert result["isError"] and "went away during the call" in result["content"][0]["text"]
    assert env.bridge.pool.statistics().calls_in_flight == 0


async def test_operator_flow_from_the_cli(env: Env) -> None:
    """`agent create` while the bridge runs, the owner's console grant, then `token issue`."""
    import os
    import sys

    home = await env.add_home("h1")
    cfg = env.bridge.config
    run_env = os.environ | {
        "FTWBRIDGE_STATE_DIR": str(cfg.state_dir),
        "FTWBRIDGE_PUBLIC_URL": env.bridge.site.public_url,
    }
    cli = [sys.executable, "-m", "ftwbridge"]
    done = await trio.run_process(
        [*cli, "agent", "create", "--home", "h1"], capture_stdout=True, env=run_env, check=True
    )
    key = bytes.fromhex(done.stdout.decode().strip())
    expires = env.bridge.clock() + 3_600_000
    argv = [*cli, "token", "issue", "--home", "h1", "--agent", "cli-agent", "--wait", "60"]
    with trio.fail_after(REAL_WAIT_S):
        # asked before the owner approves: it says it waits, then gives the token once the
        # roster listing the agent reaches the bridge's store
        async with trio.open_nursery() as nursery:
            proc = await nursery.start(
                functools.partial(
                    trio.run_process,
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=run_env,
                    check=False,
                )
            )
            assert proc.stderr is not None and proc.stdout is not None
            said = b""
            while b"waiting" not in said:
                chunk = await proc.stderr.receive_some(4096)
                assert chunk, said  # it ended without waiting
                said += chunk
            assert b"owner to approve agent 'cli-agent' of home 'h1'" in said, said
            await home.console(
                op="put_agent",
                key=key.hex(),
                id="cli-agent",
                name="CLI",
                scopes=["ftw.live.read"],
                expiresAtMs=expires,
            )
            out = b""
            while chunk := await proc.stdout.receive_some(4096):
                out += chunk
        assert proc.returncode == 0, said
    token = out.decode().strip()
    r = await post_call(env, token, "status")
    assert r.status_code == 200 and not r.json()["result"]["isError"]
    done = await trio.run_process(
        [*cli, "token", "issue", "--home", "h1", "--agent", "nobody"],
        capture_stdout=True,
        capture_stderr=True,
        env=run_env,
        check=False,
    )
    assert done.returncode == 2 and b"ftwbridge: " in done.stderr
    assert b"lists no agent 'nobody'" in done.stderr and b"Traceback" not in done.stderr


async def test_a_key_the_keys_part_never_held_is_refused_in_words(env: Env) -> None:
    home = await env.add_home("h1")
    stranger = bytes(range(32))
    expires = env.bridge.clock() + 3_600_000
    await home.console(
        op="put_agent",
        key=stranger.hex(),
        id="x",
        name="X",
        scopes=["ftw.live.read"],
        expiresAtMs=expires,
    )
    with trio.fail_after(REAL_WAIT_S):
        await env.bridge.door.wait_roster("h1", lambda r: stranger in r.agents())
    token = await env.bridge.issue_token("h1", stranger, "x", ("ftw.live.read",))
    result = (await post_call(env, token, "status")).json()["result"]
    assert result["isError"] and "holds no key for this assistant" in result["content"][0]["text"]
