"""The transport rules of PROTOCOL.md part D that need the HTTP shell itself, in plain HTTP
against a live bridge: Host and Origin (DNS rebinding), the body bound as the server enforces
it, and other methods routed to `/mcp` on a connection that stays usable.

The rules that are `McpService`'s alone (mirrored headers, versions, JSON-RPC errors for bad
requests, notifications, Accept, Content-Type, 405) are checked without sockets in
tests/mcp/test_service.py.
"""

from __future__ import annotations

import json

from .env import Env
from .test_access import META, MODERN

LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}})
LIST_HEADERS = MODERN | {"mcp-method": "tools/list"}


async def test_methods_origin_host_and_size(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    async with env.http(token) as http:
        for method in ("GET", "DELETE", "HEAD", "PUT"):
            r = await http.request(method, env.url)
            assert r.status_code == 405 and r.headers["allow"] == "POST"
        r = await http.post(
            env.url, content=LIST, headers=LIST_HEADERS | {"origin": "https://evil.example"}
        )
        assert r.status_code == 403
        r = await http.post(env.url, content=LIST, headers=LIST_HEADERS | {"origin": "null"})
        assert r.status_code == 403
        r = await http.post(
            env.url, content=LIST, headers=LIST_HEADERS | {"host": "rebind.example:80"}
        )
        assert r.status_code == 421
        big = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"'
            + b"x" * (1024 * 1024)
            + b'"}}'
        )
        r = await http.post(env.url, content=big, headers=LIST_HEADERS)
        assert r.status_code == 413
        # after a DELETE, normal calls still work
        assert (await http.post(env.url, content=LIST, headers=LIST_HEADERS)).status_code == 200
