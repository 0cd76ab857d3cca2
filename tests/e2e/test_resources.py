"""Resources and prompts with the official `mcp` client, both eras, against a real bridge and a
stub home process; then the refusals in raw JSON-RPC over HTTP, as an attacker sends them.

A read must give what the matching tool gives (the same box read, the same cleaned JSON), and
every refusal must read nothing at the box: the stub home's console counts its reads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from mcp import MCPError
from mcp_types import ResourceLink, TextContent, TextResourceContents

from ftwbridge.mcp.resources import home_base, tool_scopes

from .env import REAL_WAIT_S, Env, now_ms
from .test_access import META, MODERN


def _json(contents: Any) -> Any:
    first = contents[0]
    assert isinstance(first, TextResourceContents) and first.mime_type == "application/json"
    assert "not instructions" in contents[1].text
    return json.loads(first.text)


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_the_official_client_lists_reads_and_gets_prompts(env: Env, mode: str) -> None:
    home = await env.add_home("h 1", "--frozen-ms", str(now_ms()))
    _key, agent_id, token = await env.agent(home)
    base = home_base("h 1")
    assert base == "ftw://home/h%201/"
    energy = tool_scopes("energy_report") is not None
    async with env.http(token) as http, env.client(http, mode) as client:
        with trio.fail_after(REAL_WAIT_S):
            listed = await client.list_resources()
            names = [r.name for r in listed.resources]
            assert names == ["live", "chargers", "cars", "plan", "health", "grant"]
            assert all(str(r.uri).startswith(base) for r in listed.resources)
            templates = await client.list_resource_templates()
            assert [t.uri_template for t in templates.resource_templates] == [
                base + "history/{range}{?series,points}",
                base + "config/{section}",
                *([base + "energy/{period}"] if energy else []),
            ]
            live = _json((await client.read_resource(base + "live")).contents)
            tool = (await client.call_tool("status", {})).structured_content
            assert tool is not None and live["fields"] == tool["fields"]  # a frozen home
            config = _json((await client.read_resource(base + "config/battery")).contents)
            assert (
                config
                == (await client.call_tool("config_get", {"section": "battery"})).structured_content
            )
            uri = base + "history/6h?series=pv_w&points=6"
            history = _json((await client.read_resource(uri)).contents)
            assert set(history["series"]) == {"pv_w"} and len(history["series"]["pv_w"]) <= 6
            grant = _json((await client.read_resource(base + "grant")).contents)
            assert grant["homes"][0]["agent"] == agent_id
            prompts = await client.list_prompts()
            assert [p.name for p in prompts.prompts] == [
                "home_overview",
                "explain_plan",
                "ev_charge_advice",
                *(["energy_report"] if energy else []),
                "troubleshoot",
            ]
            got = await client.get_prompt("troubleshoot", {"symptom": "the battery stays at 20 %"})
            first = got.messages[0].content
            assert isinstance(first, TextContent) and "`health_get`" in first.text
            links = [m.content for m in got.messages[1:]]
            assert all(isinstance(link, ResourceLink) for link in links)
            assert [str(link.uri) for link in links] == [base + "health", base + "live"]  # type: ignore[union-attr]
            with pytest.raises(MCPError) as refused:
                await client.read_resource("ftw://home/another/live")
            assert refused.value.error.code == -32602
            assert refused.value.error.data == {"uri": "ftw://home/another/live"}
            with pytest.raises(MCPError) as refused:
                await client.get_prompt("ev_charge_advice", {})
            assert refused.value.error.code == -32602


async def _reads(home: Any) -> int:
    """The reads the stub home has answered (its console's `status`)."""
    return int((await home.console(op="status"))["reads"])


def _body(method: str, params: dict[str, Any]) -> bytes:
    message = {"jsonrpc": "2.0", "id": 3, "method": method, "params": params | {"_meta": META}}
    return json.dumps(message).encode()


async def test_refusals_in_raw_json_rpc(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home, scopes=["ftw.live.read"])
    base = home_base("h1")
    async with env.http(token) as http:

        async def post(
            method: str, params: dict[str, Any], name: str | None = None, **extra: str
        ) -> Any:
            headers = MODERN | {"mcp-method": method} | extra
            if name is not None:
                headers["mcp-name"] = name
            r = await http.post(env.url, content=_body(method, params), headers=headers)
            return r.status_code, r.headers, r.json()

        with trio.fail_after(REAL_WAIT_S):
            before = await _reads(home)
            for uri in (
                "ftw://home/h2/live",
                base + "live?x",
                base + "../h2/live",
                "file:///etc/passwd",
            ):
                status, _, body = await post("resources/read", {"uri": uri}, uri)
                assert (status, body["error"]["code"], body["error"]["data"]) == (
                    400,
                    -32602,
                    {"uri": uri},
                )
            status, _, body = await post("resources/read", {"uri": base + "live"}, base + "plan")
            assert (status, body["error"]["code"]) == (400, -32020)  # Mcp-Name is checked
            status, headers, body = await post(
                "resources/read", {"uri": base + "plan"}, base + "plan"
            )
            assert status == 403 and 'scope="ftw.plan.read"' in headers["www-authenticate"]
            status, _, body = await post("resources/subscribe", {"uri": base + "live"})
            assert (status, body["error"]["code"]) == (404, -32601)
            status, _, body = await post("prompts/get", {"name": "nope"}, "nope")
            assert (status, body["error"]["code"]) == (400, -32602)
            assert body["error"]["data"] == {"prompts": ["home_overview"]}
            status, _, body = await post("resources/list", {"cursor": "x"})
            assert (status, body["error"]["code"]) == (400, -32602)
            legacy = {"content-type": "application/json", "accept": "application/json"}
            r = await http.post(
                env.url,
                content=json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 4,
                        "method": "resources/subscribe",
                        "params": {"uri": base + "live"},
                    }
                ),
                headers=legacy | {"mcp-protocol-version": "2025-11-25"},
            )
            assert r.status_code == 200 and r.json()["error"]["code"] == -32601
            assert await _reads(home) == before  # no refusal read anything at the box
            status, _, body = await post("resources/read", {"uri": base + "live"}, base + "live")
            assert status == 200 and "contents" in body["result"]
            assert body["result"]["ttlMs"] == 5000 and body["result"]["cacheScope"] == "private"
            assert await _reads(home) == before + 1
