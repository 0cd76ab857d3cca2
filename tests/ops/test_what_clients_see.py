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

from devtools.sessions import DEMO_CALLS, energy_calls
from ftwbridge.mcp.charge import ChargeArgs, advise
from ftwbridge.mcp.control_tools import CONTROL_TOOLS
from ftwbridge.mcp.energy_tools import FlowContext, ReportArgs, run_report
from ftwbridge.mcp.schemas import OUTPUT_SCHEMAS
from ftwbridge.mcp.tools import TOOLS
from tests.e2e.env import REAL_WAIT_S, Env, now_ms
from tests.mcp.test_energy_tools import CARS, CONFIG, NOW, Reader, _ms, _plan

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
            for name, args in [*DEMO_CALLS, *energy_calls(now_ms())]:
                result = await client.call_tool(name, args)
                assert not result.is_error, (name, result.content)
                results[name] = result.structured_content
    for name, value in results.items():
        assert listed[name] == OUTPUT_SCHEMAS[name]
        jsonschema.validate(value, listed[name])
    assert {"energy_report", "charge_options"} <= set(results)
    broken = copy.deepcopy(results["chargers_list"])
    broken["loadpoints"][0]["power_w"] = "a lot"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, listed["chargers_list"])
    report = copy.deepcopy(results["energy_report"])
    report["periods"][0]["figures"]["importKWh"] = "12 kWh"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, listed["energy_report"])


def test_every_tool_has_a_typed_schema_down_to_each_leaf() -> None:
    """Every tool's output schema comes from a model, and every member at any depth says its
    one JSON type (a nullable one: each branch of its `anyOf`), as MCP Inspector's `--strict`
    asks (no `type` lists, no untyped member); no member claims a `null` default."""
    assert set(OUTPUT_SCHEMAS) == {t.name for t in (*TOOLS, *CONTROL_TOOLS)}
    for tool, schema in OUTPUT_SCHEMAS.items():
        for path, sub in walk(schema):
            branches = sub.get("anyOf", [sub])  # one type each: MCP Inspector's --strict
            assert all(isinstance(b.get("type"), str) for b in branches), (tool, path, sub)
            assert sub.get("default", 0) is not None, (tool, path, sub)


@pytest.mark.parametrize(
    ("args", "now"),
    [
        (ReportArgs(period="month", count=2), _ms(2026, 11, 20, 14)),  # running: two reads
        (ReportArgs(period="week", count=3), _ms(2027, 1, 4, 0, 30)),  # across a year end
        (ReportArgs(period="day", end=_ms(2026, 10, 25, 12)), _ms(2026, 11, 2, 9)),
    ],
)
async def test_reports_from_the_stub_home_satisfy_the_schema(args: ReportArgs, now: int) -> None:
    out = await run_report(Reader(now), args, FlowContext(now, 400, 900))
    assert out["periods"]
    jsonschema.validate(out, OUTPUT_SCHEMAS["energy_report"])


@pytest.mark.parametrize(
    ("cars", "target", "hours"),
    [
        (CARS, 80, 7),  # reachable, a goal_request
        (CARS, 42, 4),  # reachable, an ev_charge_now
        (CARS, 100, 1),  # unreachable
        (CARS, 30, 1),  # already_met
        ({"cars": [CARS["cars"][0] | {"plugged": False}]}, None, 1),
        ({"cars": [CARS["cars"][0] | {"capacity_wh": None}]}, None, 1),
        ({"cars": []}, None, 1),  # no_car
    ],
)
def test_every_kind_of_advice_satisfies_the_schema(
    cars: Any, target: int | None, hours: int
) -> None:
    plan = _plan([50] * 8 + [300] * 4 + [100] * 16)
    args = ChargeArgs(ready_by=NOW + hours * 3_600_000, target_percent=target)
    for config in (CONFIG, {"config": {}}):  # the second names no charger
        out = advise(cars, config, plan, args, NOW)
        jsonschema.validate(out, OUTPUT_SCHEMAS["charge_options"])


async def test_the_bridges_address_says_what_it_is(env: Env) -> None:
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        r = await http.get(env.bridge.site.public_url.rstrip("/") + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("ftwbridge ") and f"Assistants connect to {env.url} " in r.text
