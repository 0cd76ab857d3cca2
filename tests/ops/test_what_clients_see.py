"""What an MCP client sees of the bridge: `serverInfo` with a title, a description, a website
and an icon the bridge sends itself (a `data:` URI, nothing to fetch); an icon on every tool;
and output schemas generated from typed result models, nested, with units in their
descriptions, that the real results of every read tool satisfy (the official client validates
them too, and refuses a result that does not)."""

from __future__ import annotations

import base64
import copy
from typing import Any

import httpx2
import jsonschema
import pytest
import trio

from devtools.sessions import DEMO_CALLS
from ftwbridge.mcp.schemas import OUTPUT_SCHEMAS
from tests.e2e.env import REAL_WAIT_S, Env

FLAT = ("config_get", "diag_run", "ev_charge_now", "ev_stop", "goal_request")
"""Results with no nested object of their own (their open maps are the box's)."""
UNITS = {"_w": "W", "_wh": "Wh", "Ms": "ms", "_permille": "permille", "_km": "km", "W": "W"}


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every property of `schema` at any depth, as (dotted path, its schema)."""
    out = []
    for name, sub in schema.get("properties", {}).items():
        out.append((f"{path}{name}", sub))
        for branch in [
            sub,
            sub.get("items", {}),
            *sub.get("anyOf", []),
            sub.get("additionalProperties") or {},
        ]:
            if isinstance(branch, dict):
                out += walk(branch, f"{path}{name}.")
                if isinstance(branch.get("items"), dict):
                    out += walk(branch["items"], f"{path}{name}[].")
    return out


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # auto: serverInfo from server/discover
async def test_server_info_names_and_shows_the_bridge(env: Env, mode: str) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    async with env.http(token) as http, env.client(http, mode) as client:
        with trio.fail_after(REAL_WAIT_S):
            info = client.server_info
            tools = (await client.list_tools()).tools
    assert info is not None and info.name == "ftwbridge" and info.title == "FTW home energy"
    assert info.description and info.website_url and info.website_url.startswith("https://")
    assert info.icons and all(i.src.startswith("data:image/svg+xml;base64,") for i in info.icons)
    svg = base64.b64decode(info.icons[0].src.split(",", 1)[1])
    assert svg.startswith(b"<svg") and b"http://www.w3.org/2000/svg" in svg and b"href" not in svg
    assert all(t.icons and t.icons[0].src == info.icons[0].src for t in tools)


def test_every_read_schema_is_nested_with_units_in_words() -> None:
    for tool, schema in OUTPUT_SCHEMAS.items():
        assert (
            schema["type"] == "object" and "$defs" not in str(schema) and "$ref" not in str(schema)
        )
        props = walk(schema)
        nested = [
            p for p, sub in props if "." in p or isinstance(sub.get("additionalProperties"), dict)
        ]
        assert nested or tool in FLAT, tool
        for path, sub in props:
            leaf = path.rsplit(".", 1)[-1].removesuffix("[]")
            unit = next((u for suffix, u in UNITS.items() if leaf.endswith(suffix)), None)
            if unit is not None and "integer" in str(sub):
                assert unit in sub.get("description", ""), (tool, path, sub)


async def test_real_results_satisfy_the_listed_schemas(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            listed = {t.name: t.output_schema for t in (await client.list_tools()).tools}
            results = {}
            for name, args in DEMO_CALLS:
                result = await client.call_tool(name, args)
                assert not result.is_error, (name, result.content)
                results[name] = result.structured_content
    for name, value in results.items():
        assert listed[name] == OUTPUT_SCHEMAS[name]
        jsonschema.validate(value, listed[name])
    broken = copy.deepcopy(results["chargers_list"])
    broken["loadpoints"][0]["power_w"] = "a lot"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, listed["chargers_list"])


async def test_the_bridges_address_says_what_it_is(env: Env) -> None:
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.get(env.bridge.site.public_url.rstrip("/") + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("ftwbridge ") and f"Assistants connect to {env.url} " in r.text
