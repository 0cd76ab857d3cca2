"""Strictness of `/mcp` without sockets: JSON as RFC 8259 writes it, names the server does not
have, tool arguments exactly as each tool's `inputSchema` says, and the bare 401 challenge."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from ftwbridge.mcp.control_tools import CONTROL_TOOLS
from ftwbridge.mcp.server import HttpRequest
from ftwbridge.mcp.tools import TOOLS
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.proto.session import Reply

from .test_service import META, RECORD, call, post, service

EVERY_SCOPE = dataclasses.replace(RECORD, scopes=tuple(sorted(s.value for s in READ_SCOPES)))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":NaN}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":Infinity}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":[-Infinity]}}',
        b'{"jsonrpc":"2.0","id":NaN,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":1,"id":"\\ud800","method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"a":{"b":1,"b":2}}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'.encode("utf-16"),
        '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'.encode("utf-32-le"),
    ],
)
async def test_not_json_is_a_parse_error(raw: bytes) -> None:
    """NaN and the infinities are not JSON (RFC 8259 section 6); a member named twice is
    refused too (our choice, docs/protocol.md): -32700 with a null id, anywhere in the body."""
    status, body = await post(service(None), None, {}, raw=raw)
    assert (status, body["error"]["code"], body["id"]) == (400, -32700, None)


def _list(era: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": params}
    if era == "legacy":
        return body, {}
    body["params"] = params | {"_meta": META}
    return body, {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_cursor_never_issued_is_invalid_params(era: str) -> None:
    svc = service(None)
    status, body = await post(svc, *_list(era, {}))
    assert status == 200 and len(body["result"]["tools"]) == len(TOOLS) + len(CONTROL_TOOLS)
    assert "nextCursor" not in body["result"]  # one page holds every tool
    for cursor in ("abc", "", 0, None):
        status, body = await post(svc, *_list(era, {"cursor": cursor}))
        if cursor is None:  # an absent cursor: JSON null stands for "not given"
            assert status == 200
            continue
        assert (status, body["error"]["code"], body["id"]) == (400, -32602, 3), cursor


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_an_unknown_tool_is_invalid_params(era: str) -> None:
    body, headers = call("no_such_tool", {})
    if era == "legacy":
        body["params"].pop("_meta")
        headers = {}
    status, answer = await post(service(None), body, headers)
    assert answer["error"]["code"] == -32602 and "no_such_tool" in answer["error"]["message"]
    assert "status" in answer["error"]["data"]["tools"]
    assert status == 400


def _refused_by(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Values one property's schema refuses: (what, value)."""
    types = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
    if "integer" in types:
        yield from [("bool", True), ("fraction", 2.5), ("text", "2")]
        if "null" not in types:
            yield "null", None
        for s in [schema, *schema.get("anyOf", [])]:
            if "minimum" in s:
                yield "below", s["minimum"] - 1
            if "maximum" in s:
                yield "above", s["maximum"] + 1
    if "string" in types:
        yield from [("number", 5), ("bool", False), ("list", ["a"])]
        if "enum" in schema:
            yield "not listed", "no-such-" + schema["enum"][0]
        if "null" not in types:
            yield "null", None
        for s in [schema, *schema.get("anyOf", [])]:
            if "maxLength" in s:
                yield "too long", "x" * (s["maxLength"] + 1)
    if "array" in types:
        yield from [("text", "pv_w"), ("empty", []), ("numbers", [1])]


def _cases() -> Iterator[Any]:
    for tool in TOOLS:
        schema = tool.definition()["inputSchema"]
        required = {p: _valid(tool.name, p) for p in schema.get("required", [])}
        yield pytest.param(
            tool.name, {**required, "unknown": 1}, "unknown", id=f"{tool.name}-extra"
        )
        for p in schema.get("required", []):
            yield pytest.param(tool.name, {}, p, id=f"{tool.name}-{p}-missing")
        for prop, sub in schema["properties"].items():
            for what, value in _refused_by(sub):
                args = required | {prop: value}
                yield pytest.param(tool.name, args, prop, id=f"{tool.name}-{prop}-{what}")


def _valid(tool: str, prop: str) -> Any:
    return {"section": "site", "check": "clock", "period": "month", "ready_by": 0}[prop]


@pytest.mark.parametrize(("tool", "arguments", "prop"), list(_cases()))
async def test_what_the_schema_refuses_the_tool_refuses(
    tool: str, arguments: dict[str, Any], prop: str
) -> None:
    spec = next(t for t in TOOLS if t.name == tool)
    schema = spec.definition()["inputSchema"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(arguments, schema)  # the advertised schema refuses it ...
    svc = service(Reply(1, "live", {}), record=EVERY_SCOPE)
    status, body = await post(svc, *call(tool, arguments))
    assert "result" in body, body
    result = body["result"]  # ... and so does the tool, in words that name the argument
    assert status == 200 and result["isError"], (arguments, result)
    text = result["content"][0]["text"]
    assert "not valid" in text and (prop in text or "arguments" in text), text
    assert svc._homes.calls == []  # type: ignore[attr-defined]  # nothing reached the home


async def test_logs_tail_lines_true_is_refused_naming_lines() -> None:
    _, body = await post(service(None, record=EVERY_SCOPE), *call("logs_tail", {"lines": True}))
    assert body["result"]["isError"] and "lines" in body["result"]["content"][0]["text"]


async def test_no_credentials_get_a_challenge_without_an_error() -> None:
    """RFC 6750 section 3.1: a request without credentials gets no `error` attribute; a token
    that was sent and is bad gets `invalid_token`."""
    svc = service(None)
    data = json.dumps(_list("legacy", {})[0]).encode()

    async def read() -> bytes:
        return data

    bare = await svc.handle(HttpRequest("POST", {"content-type": ["application/json"]}, read, 1))
    challenge = bare.headers["www-authenticate"]
    assert bare.status == 401 and "error=" not in challenge and "resource_metadata=" in challenge
    headers = {"content-type": ["application/json"], "authorization": ["Bearer bad"]}
    bad = await svc.handle(HttpRequest("POST", headers, read, 1))
    assert bad.status == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]


async def test_a_401_says_why_the_token_does_not_work() -> None:
    """An expired token and a withdrawn agent each get `invalid_token` with their own words."""
    body = json.dumps(_list("legacy", {})[0]).encode()

    async def read() -> bytes:
        return body

    expired = dataclasses.replace(RECORD, expires_at_ms=999)  # the service's clock says 1000
    resp = await service(None, record=expired).handle(
        HttpRequest(
            "POST",
            {"content-type": ["application/json"], "authorization": ["Bearer good"]},
            read,
            1,
        )
    )
    assert resp.status == 401 and "expired" in resp.headers["www-authenticate"]
    svc = service(None)

    async def no_grant(home: str, agent_key: bytes) -> None:
        return None

    svc._auth._grant = no_grant  # type: ignore[assignment]  # the roster no longer lists it
    resp = await svc.handle(
        HttpRequest(
            "POST",
            {"content-type": ["application/json"], "authorization": ["Bearer good"]},
            read,
            1,
        )
    )
    assert resp.status == 401 and "withdrawn" in json.loads(resp.body)["error_description"]
