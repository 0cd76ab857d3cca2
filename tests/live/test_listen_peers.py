"""`subscriptions/listen` with the official TypeScript client (@modelcontextprotocol/client
2.4, `peers/ts_listen.mjs`) against a real bridge and a stub home process."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from ftwbridge.mcp.listen_rules import SUBSCRIPTION_ID, live_uri
from tests.peers.test_peers import NODE_BIN, node_env, run

from ..e2e.env import REAL_WAIT_S, Env


async def test_the_typescript_client_listens_to_live(env: Env, tmp_path: Path) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    uri = live_uri(home.name)
    argv = [str(NODE_BIN / "node"), "ts_listen.mjs", env.url, token, uri]
    code, out, err = await run(argv, node_env(tmp_path))
    assert code == 0, err[-2000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["honored"] == {"resourceSubscriptions": [uri]}
    [first, *_] = seen["updates"]
    assert first["uri"] == uri and first["meta"][SUBSCRIPTION_ID].startswith("listen:")
    assert env.bridge.pool.feeds.stats.box_reads == 0
    with trio.fail_after(REAL_WAIT_S):  # its close (abort and notifications/cancelled) ended it
        await env.bridge.listens.wait_streams_at_most(0)
