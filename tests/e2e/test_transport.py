"""The transport rules of PROTOCOL.md part D, one by one, in plain HTTP against a live bridge."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from .env import Env
from .test_access import META, MODERN, call_body


async def ready(env: Env) -> str:
    home = await env.add_home("h1")
    return (await env.agent(home))[2]


async def post(
    env: Env, token: str, body: Any, headers: dict[str, str], raw: bytes | None = None
) -> Any:
    async with env.http(token) as http:
        content = raw if raw is not None else json.dumps(body).encode()
        return await http.post(env.url, content=content, headers=headers)


def list_body(rid: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": {"_meta": META}}


LIST_HEADERS = MODERN | {"mcp-method": "tools/list"}


async def test_transport_rules(env: Env) -> None:
    token = await ready(env)
    # header mismatch: -32020
    r = await post(env, token, list_body(), MODERN | {"mcp-method": "tools/call"})
    assert (r.status_code, r.json()["error"]["code"], r.json()["id"]) == (400, -32020, 1)
    r = await post(
        env,
        token,
        call_body("status"),
        MODERN | {"mcp-method": "tools/call", "mcp-name": "cars_list"},
    )
    assert r.json()["error"]["code"] == -32020
    # the Base64 form of a mirrored header is decoded
    b64 = "=?base64?" + base64.b64encode(b"status").decode() + "?="
    r = await post(
        env, token, call_body("status"), MODERN | {"mcp-method": "tools/call", "mcp-name": b64}
    )
    assert r.status_code == 200 and "result" in r.json()
    # unsupported version: -32022 with the supported list
    body = list_body()
    body["params"]["_meta"] = META | {"io.modelcontextprotocol/protocolVersion": "2030-01-01"}
    r = await post(env, token, body, LIST_HEADERS | {"mcp-protocol-version": "2030-01-01"})
    assert r.status_code == 400 and r.json()["error"]["code"] == -32022
    assert r.json()["error"]["data"]["supported"] == ["2026-07-28"]
    # unknown method: 404 -32601; initialize in the modern era too
    for method in ("nope/nothing", "initialize"):
        b = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": META}}
        r = await post(env, token, b, MODERN | {"mcp-method": method})
        assert (r.status_code, r.json()["error"]["code"], r.json()["id"]) == (404, -32601, 7)
    # notifications: 202, empty body, in both eras
    n = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await post(env, token, n, MODERN | {"mcp-method": n["method"]})).status_code == 202
    r = await post(
        env, token, n, {"content-type": "application/json", "mcp-protocol-version": "2025-11-25"}
    )
    assert (r.status_code, r.content) == (202, b"")
    # a batch is refused
    r = await post(env, token, [list_body(1), list_body(2)], LIST_HEADERS)
    assert r.status_code == 400 and r.json()["error"]["code"] == -32600 and r.json()["id"] is None
    # parse errors and a non-UTF-8 body: 400 with "id": null
    for raw in (b"{not json", b"\xff\xfe\x00"):
        r = await post(env, token, None, LIST_HEADERS, raw=raw)
        assert (r.status_code, r.json()["error"]["code"], r.json()["id"]) == (400, -32700, None)
    # "id": null is not a request
    r = await post(env, token, list_body(None), LIST_HEADERS)
    assert (r.status_code, r.json()["error"]["code"]) == (400, -32600)
    # a bad envelope with a valid id echoes it
    r = await post(
        env,
        token,
        {"jsonrpc": "2.0", "id": "abc", "method": "tools/list", "params": {}},
        LIST_HEADERS,
    )
    assert (r.status_code, r.json()["error"]["code"], r.json()["id"]) == (400, -32602, "abc")
    # a deeply nested or huge id
    r = await post(
        env,
        token,
        None,
        LIST_HEADERS,
        raw=b'{"jsonrpc":"2.0","id":' + b"[" * 100000 + b"]" * 100000 + b',"method":"tools/list"}',
    )
    assert r.status_code == 400 and r.json()["id"] is None
    r = await post(env, token, list_body("x" * 10_000), LIST_HEADERS)
    assert r.status_code == 400 and r.json()["id"] is None
    # a legacy request with no version header is taken as 2025-03-26 and answered
    r = await post(
        env,
        token,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        {"content-type": "application/json"},
    )
    assert r.status_code == 200 and len(r.json()["result"]["tools"]) == 13
    assert "mcp-session-id" not in r.headers
    # server/discover with a modern header
    b = {"jsonrpc": "2.0", "id": 4, "method": "server/discover", "params": {"_meta": META}}
    r = await post(env, token, b, MODERN | {"mcp-method": "server/discover"})
    assert r.json()["result"]["supportedVersions"] == ["2026-07-28"]
    # a stray Mcp-Session-Id is ignored
    r = await post(env, token, list_body(), LIST_HEADERS | {"mcp-session-id": "whatever"})
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("accept", "status"),
    [
        ("application/json, text/event-stream", 200),
        ("application/json", 200),
        ("*/*", 200),
        (None, 200),
        ("text/event-stream", 406),
    ],
)
async def test_accept_variants(env: Env, accept: str | None, status: int) -> None:
    token = await ready(env)
    headers = dict(LIST_HEADERS)
    headers.pop("accept")
    if accept is not None:
        headers["accept"] = accept
    r = await post(env, token, list_body(), headers)
    assert r.status_code == status
    if status == 200:
        assert r.headers["content-type"].startswith("application/json")


async def test_methods_origin_host_and_size(env: Env) -> None:
    token = await ready(env)
    async with env.http(token) as http:
        for method in ("GET", "DELETE", "HEAD", "PUT"):
            r = await http.request(method, env.url)
            assert r.status_code == 405 and r.headers["allow"] == "POST"
        r = await http.post(
            env.url,
            content=json.dumps(list_body()),
            headers=LIST_HEADERS | {"origin": "https://evil.example"},
        )
        assert r.status_code == 403
        r = await http.post(
            env.url, content=json.dumps(list_body()), headers=LIST_HEADERS | {"origin": "null"}
        )
        assert r.status_code == 403
        r = await http.post(
            env.url,
            content=json.dumps(list_body()),
            headers=LIST_HEADERS | {"host": "rebind.example:80"},
        )
        assert r.status_code == 421
        big = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"'
            + b"x" * (1024 * 1024)
            + b'"}}'
        )
        r = await http.post(env.url, content=big, headers=LIST_HEADERS)
        assert r.status_code == 413
        r = await http.post(
            env.url,
            content=json.dumps(list_body()),
            headers=LIST_HEADERS | {"content-type": "text/plain"},
        )
        assert r.status_code == 415
        # after a DELETE, normal calls still work
        assert (
            await http.post(env.url, content=json.dumps(list_body()), headers=LIST_HEADERS)
        ).status_code == 200
