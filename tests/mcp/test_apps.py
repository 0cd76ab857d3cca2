"""MCP Apps (mcp/apps.py, docs/apps.md) through `McpService` without sockets: what a client
that negotiated the view sees, what one that did not sees (byte for byte today's tools), the
view resource, the app-only tool's refusal and scope, and its cache (trio's MockClock)."""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from mcp.server import apps as sdk_apps

from ftwbridge.mcp import apps
from ftwbridge.mcp.control_tools import CONTROL_TOOLS
from ftwbridge.mcp.server import HttpRequest, McpService
from ftwbridge.mcp.tools import TOOLS
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from tests.mcp.test_catalog import ALL, service

UI = {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}
"""The client capabilities of a host that renders MCP Apps (SEP-1865)."""


async def call(
    svc: McpService,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    caps: dict[str, Any] | None = None,
    era: str = "modern",
) -> tuple[int, bytes]:
    """One request, `caps` as the client capabilities of its `_meta` (modern era)."""
    params = dict(params or {})
    headers = {"content-type": ["application/json"], "authorization": ["Bearer good"]}
    if era == "modern":
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps or {},
        }
        headers |= {"mcp-protocol-version": ["2026-07-28"], "mcp-method": [method]}
        name = params.get("uri", params.get("name"))
        if isinstance(name, str):
            headers["mcp-name"] = [name]
    else:
        headers["mcp-protocol-version"] = ["2025-11-25"]
    data = json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()

    async def read() -> bytes:
        return data

    resp = await svc.handle(HttpRequest("POST", headers, read, len(data)))
    return resp.status, resp.body


def test_the_constants_are_the_sdks() -> None:
    assert apps.EXTENSION_ID == sdk_apps.EXTENSION_ID
    assert apps.APP_MIME == sdk_apps.APP_MIME_TYPE


async def test_the_extension_is_declared_in_both_eras() -> None:
    svc, _ = service()
    _, body = await call(svc, "server/discover")
    assert json.loads(body)["result"]["capabilities"]["extensions"] == {apps.EXTENSION_ID: {}}
    _, body = await call(svc, "initialize", {"protocolVersion": "2025-11-25"}, era="legacy")
    assert json.loads(body)["result"]["capabilities"]["extensions"] == {apps.EXTENSION_ID: {}}


@pytest.mark.parametrize(
    ("era", "caps"),
    [
        ("modern", None),
        ("modern", {"extensions": {}}),
        ("modern", {"extensions": {apps.EXTENSION_ID: {"mimeTypes": ["text/html"]}}}),
        ("modern", {"extensions": {apps.EXTENSION_ID: {"mimeTypes": "text/html;profile=mcp-app"}}}),
        ("modern", {"extensions": {apps.EXTENSION_ID: None}}),
        ("modern", {"extensions": ["io.modelcontextprotocol/ui"]}),
        ("legacy", None),
    ],
)
async def test_without_the_mime_type_the_tools_are_todays_byte_for_byte(
    era: str, caps: dict[str, Any] | None
) -> None:
    svc, homes = service()
    _, body = await call(svc, "tools/list", caps=caps, era=era)
    tools = [t.definition() for t in TOOLS] + [t.definition() for t in CONTROL_TOOLS]
    result: dict[str, Any] = {"tools": tools}
    if era == "modern":
        result |= {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    today = {"jsonrpc": "2.0", "id": 7, "result": result}
    assert body == json.dumps(today, ensure_ascii=False, separators=(",", ":")).encode()
    assert b"_meta" not in body and apps.LIVE_TOOL.encode() not in body
    _, listed = await call(svc, "resources/list", caps=caps, era=era)
    assert b"ui://" not in listed
    assert homes.reads == []


async def test_with_the_mime_type_the_view_tools_carry_its_uri() -> None:
    svc, homes = service()
    _, body = await call(svc, "tools/list", caps={"extensions": UI})
    tools = json.loads(body)["result"]["tools"]
    plain = [t.definition() for t in TOOLS] + [t.definition() for t in CONTROL_TOOLS]
    assert [t["name"] for t in tools] == [t["name"] for t in plain] + [apps.LIVE_TOOL]
    for tool, before in zip(tools, plain, strict=False):
        if tool["name"] in apps.WITH_VIEW:
            assert tool == before | {"_meta": {"ui": {"resourceUri": apps.VIEW_URI}}}
        else:
            assert tool == before
    live = tools[-1]
    assert live["_meta"] == {"ui": {"resourceUri": apps.VIEW_URI, "visibility": ["app"]}}
    assert live["annotations"]["readOnlyHint"] is True
    _, listed = await call(svc, "resources/list", caps={"extensions": UI})
    view = json.loads(listed)["result"]["resources"][-1]
    assert view["uri"] == apps.VIEW_URI and view["mimeType"] == apps.APP_MIME
    assert view["_meta"]["ui"]["csp"]["connectDomains"] == []
    assert homes.reads == []


def test_energy_report_carries_the_view_once_it_is_a_tool() -> None:
    base = [{"name": "energy_report", "inputSchema": {}}, {"name": "health_get"}]
    listed = apps.tool_list(base)
    assert listed[0]["_meta"] == {"ui": {"resourceUri": apps.VIEW_URI}}
    assert listed[1] == {"name": "health_get"} and listed[2]["name"] == apps.LIVE_TOOL
    assert base[0] == {"name": "energy_report", "inputSchema": {}}  # not changed in place


async def test_the_view_is_read_whole_and_small_with_no_network_of_its_own() -> None:
    svc, homes = service(("ftw.history.read",))  # static: any token of the bridge reads it
    status, body = await call(svc, "resources/read", {"uri": apps.VIEW_URI})
    assert status == 200
    result = json.loads(body)["result"]
    (content,) = result["contents"]
    assert content["mimeType"] == apps.APP_MIME and content["uri"] == apps.VIEW_URI
    assert content["_meta"]["ui"] == apps.UI_META and result["ttlMs"] == apps.VIEW_TTL_MS
    html = content["text"]
    assert html.startswith("<!doctype html>") and len(html.encode()) < 30_000
    assert "/*REASONS*/" not in html and "The battery keeps a reserve for later." in html
    urls = set(re.findall(r"\w+://[^\s\"'<>)]*", html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls  # the SVG namespace only
    for needle in ("fetch(", "XMLHttpRequest", "WebSocket", "EventSource", "@import", "<link"):
        assert needle not in html
    assert not re.search(r"<[a-z]+\s[^>]*\bsrc\s*=", html)  # no element loads anything
    assert homes.reads == []


async def test_the_app_only_tool_is_refused_in_words_to_a_client_without_the_view() -> None:
    svc, homes = service()
    for era in ("modern", "legacy"):
        _, body = await call(svc, "tools/call", {"name": apps.LIVE_TOOL, "arguments": {}}, era=era)
        result = json.loads(body)["result"]
        assert result["isError"] is True
        assert "app-only" in result["content"][0]["text"]
    assert homes.reads == []


async def test_the_app_only_tool_needs_the_live_scope_and_no_arguments() -> None:
    svc, homes = service(("ftw.plan.read",))
    params = {"name": apps.LIVE_TOOL, "arguments": {}}
    status, body = await call(svc, "tools/call", params, caps={"extensions": UI})
    assert status == 403 and b"ftw.live.read" in body
    svc, homes = service()
    params = {"name": apps.LIVE_TOOL, "arguments": {"x": 1}}
    _, body = await call(svc, "tools/call", params, caps={"extensions": UI})
    assert json.loads(body)["result"]["isError"] is True
    assert homes.reads == []


async def test_the_app_only_tool_answers_the_status_read_once_per_cache_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    svc, homes = service(ALL)
    params = {"name": apps.LIVE_TOOL, "arguments": {}}
    _, status_body = await call(svc, "tools/call", {"name": "status", "arguments": {}})
    assert homes.reads == [Read.LIVE_GET]
    answers = []
    for _ in range(120):  # a view polling every 5 s for 10 minutes
        _, body = await call(svc, "tools/call", params, caps={"extensions": UI})
        answers.append(json.loads(body)["result"])
        await trio.sleep(apps.LIVE_CACHE_S)
    assert answers[0] == json.loads(status_body)["result"]
    assert len(homes.reads) == 1 + 120
    homes.reads.clear()
    async with trio.open_nursery() as nursery:  # polling faster costs nothing more
        for _ in range(50):
            nursery.start_soon(partial(call, svc, "tools/call", params, caps={"extensions": UI}))
            await trio.sleep(0.1)
    assert len(homes.reads) == 1


async def test_a_refused_read_is_not_kept(autojump_clock: trio.testing.MockClock) -> None:
    svc, homes = service(ALL, answer=Refusal(Code.E_UNAVAILABLE, {}))
    params = {"name": apps.LIVE_TOOL, "arguments": {}}
    for _ in range(2):
        _, body = await call(svc, "tools/call", params, caps={"extensions": UI})
        assert json.loads(body)["result"]["isError"] is True
    assert len(homes.reads) == 2
