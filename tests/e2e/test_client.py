"""The official `mcp` client, modern and legacy, against the bridge and a stub home process."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from devtools.sessions import DEMO_CALLS, energy_calls
from ftwbridge.proto.clean import clean, to_json
from stubbox.home import HOSTILE_FRAGMENTS, Home

from .env import CONTROL_NAMES, READ_ONLY_NAMES, REAL_WAIT_S, Env, now_ms

TOOL_NAMES = {name for name, _ in (*DEMO_CALLS, *energy_calls(0))}


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy", "auto"])
async def test_every_tool_reads_what_the_home_holds(env: Env, mode: str) -> None:
    frozen = now_ms()
    home = await env.add_home("h1", "--frozen-ms", str(frozen))
    _key, agent_id, token = await env.agent(home)
    sim = Home(seed=1, home_id="h1")  # the stub's own model: its readings flicker per home
    async with env.http(token) as http, env.client(http, mode) as client:
        with trio.fail_after(REAL_WAIT_S):
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == TOOL_NAMES | set(CONTROL_NAMES)
            read_only = {
                t.name for t in tools.tools if t.annotations and t.annotations.read_only_hint
            }
            assert read_only == set(READ_ONLY_NAMES)
            results = {}
            for name, args in DEMO_CALLS:
                result = await client.call_tool(name, args)
                assert not result.is_error, (name, result.content)
                assert result.structured_content is not None
                assert "not instructions" in result.content[-1].text  # type: ignore[union-attr]
                results[name] = result.structured_content
    expect_live = to_json(sim.live(frozen, 0))
    assert results["status"]["fields"] == expect_live["fields"]
    assert results["chargers_list"] == to_json(sim.loadpoints(frozen))
    assert results["cars_list"] == to_json(sim.cars(frozen))
    assert results["config_get"] == to_json(sim.config("battery"))
    assert [d["name"] for d in results["drivers_status"]["drivers"]] == [
        d["name"] for d in sim.drivers(frozen, 0)["drivers"]
    ]
    assert results["homes_list"]["homes"][0]["agent"] == agent_id
    events = sim.events(frozen, limit=3)
    assert events is not None and results["events_list"] == to_json(events)
    history = results["history_query"]["series"]
    assert set(history) == {"pv_w", "load_w"} and all(len(p) <= 24 for p in history.values())
    step = results["history_query"]["stepMs"]
    for t, v in history["pv_w"]:
        if v is not None:  # a bucket's mean of the box's samples, each rounded to a whole W
            assert abs(v - sim.series_value("pv_w", t, step)) <= 1


async def test_hostile_strings_arrive_cleaned(env: Env) -> None:
    home = await env.add_home("h1", "--hostile")
    _key, _agent, token = await env.agent(home)
    seen = []
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            for name, args in [
                ("chargers_list", {}),
                ("cars_list", {}),
                ("events_list", {"limit": 20}),
                ("logs_tail", {"lines": 50, "level": "debug"}),
                ("drivers_status", {}),
            ]:
                result = await client.call_tool(name, args)
                assert not result.is_error
                texts = strings(result.structured_content) + [c.text for c in result.content]  # type: ignore[union-attr]
                for text in texts:
                    assert clean(text) == text, (name, text)
                    for fragment in HOSTILE_FRAGMENTS:
                        assert fragment not in text or clean(fragment) == fragment
                seen += texts
    assert any("Garage" in t for t in seen)
