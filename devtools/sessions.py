"""The scripted assistant: the official `mcp` client reading a home (every read tool, the
energy questions, resources and a prompt), taking control within the owner's grant, and
listening to the home's live resource. Each session returns the lines the demo prints.
"""

from __future__ import annotations

import json
import time
from typing import Any

from devtools.rig import console

DAY_MS = 86_400_000

DEMO_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("homes_list", {}),
    ("status", {}),
    ("chargers_list", {}),
    ("cars_list", {}),
    ("plan_get", {"hours": 6}),
    ("plan_explain", {"hours": 6}),
    ("history_query", {"range": "24h", "series": ["pv_w", "load_w"], "points": 24}),
    ("health_get", {}),
    ("events_list", {"limit": 3}),
    ("logs_tail", {"lines": 3, "level": "warn"}),
    ("drivers_status", {}),
    ("config_get", {"section": "battery"}),
    ("diag_run", {"check": "clock"}),
]


def _summary(name: str, data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False)
    return f"  {name:15} {text[:150]}{'…' if len(text) > 150 else ''}"


def energy_calls(home_now_ms: int) -> list[tuple[str, dict[str, Any]]]:
    """The demo's energy questions: this month against last (`energy_report`), and how to
    charge the car to 90 % by 12 hours after the home's `home_now_ms` (`charge_options`)."""
    return [
        ("energy_report", {"period": "month", "count": 2}),
        ("charge_options", {"ready_by": home_now_ms + 12 * 3_600_000, "target_percent": 90}),
    ]


async def _ask_energy(client: Any, home_now_ms: int) -> list[str]:
    lines = []
    for name, args in energy_calls(home_now_ms):
        result = await client.call_tool(name, args)
        data = result.structured_content
        if result.is_error or not isinstance(data, dict):
            lines.append(_summary(name, result.content[0].text))
            continue
        lines.append(f"  {name:15} {data.get('summary') or data.get('message')}")
        if name == "charge_options" and "advice" in data:
            lines.append(f"  {'':15} advice: {json.dumps(data['advice'])}")
    return lines


async def assistant_session(
    url: str, mode: str, *, token: str | None = None, auth: Any = None, home_offset_ms: int = 0
) -> list[str]:
    """Run the official `mcp` client in `mode` with a bearer token or an OAuth provider;
    returns one printed line per tool called. `home_offset_ms` is how far the home's clock
    runs ahead of ours (ms), for the charging question's `ready_by`."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    lines = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, auth=auth, timeout=httpx2.Timeout(30.0))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        tools = await client.list_tools()
        lines.append(f"[{mode}] protocol {client.protocol_version}: {len(tools.tools)} tools")
        for name, args in DEMO_CALLS:
            result = await client.call_tool(name, args)
            data = result.structured_content if not result.is_error else result.content[0].text  # type: ignore[union-attr]
            lines.append(_summary(name, data))
        lines += await _ask_energy(client, int(time.time() * 1000) + home_offset_ms)
        lines += await _resources_and_prompt(client)
    return lines


async def _resources_and_prompt(client: Any) -> list[str]:
    """The assistant lists the home's resources, reads `live`, and gets the `home_overview`
    prompt (docs/resources.md); one printed line each."""
    listed = await client.list_resources()
    names = ", ".join(r.name for r in listed.resources)
    live = next(r for r in listed.resources if r.name == "live")
    read = await client.read_resource(str(live.uri))
    prompt = await client.get_prompt("home_overview")
    text = prompt.messages[0].content.text
    return [
        f"  {'resources':15} {len(listed.resources)}: {names}",
        _summary("read live", json.loads(read.contents[0].text)),
        f"  {'prompt':15} home_overview: {len(prompt.messages)} messages, {text[:100]}…",
    ]


async def control_session(url: str, auth: Any, console_port: int, home: str) -> list[str]:
    """The assistant's control in the 2026-07-28 era (docs/control.md): it starts a charge,
    which the person confirms when the bridge asks, reads the hold, stops it, and asks the
    owner for a charge target, which the demo home's owner approves at home (`--approve-all`;
    its console shows the decision). Returns the printed lines."""
    import httpx2
    from mcp import Client
    from mcp.client.session import ClientRequestContext
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import ElicitRequestParams, ElicitResult, ErrorData

    lines: list[str] = []

    async def person(
        context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        lines.append(f"  the bridge asks the person: {params.message!r}; they confirm")
        return ElicitResult(action="accept", content={"confirm": True})

    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0))
    client = Client(
        streamable_http_client(url, http_client=http),
        mode="2026-07-28",
        elicitation_callback=person,
    )
    async with http, client:

        async def show(label: str, name: str, args: dict[str, Any]) -> Any:
            result = await client.call_tool(name, args)
            data = result.structured_content if not result.is_error else result.content[0].text  # type: ignore[union-attr]
            lines.append(_summary(label, data))
            return data

        lines.append("[2026-07-28] the assistant takes control within the owner's grant:")
        await show("ev_charge_now", "ev_charge_now", {"charger": "lp1", "power_w": 7400})
        held = await show("  hold now", "chargers_list", {})
        lines[-1] = _summary("hold now", held["loadpoints"][0] if isinstance(held, dict) else held)
        await show("ev_stop", "ev_stop", {"charger": "lp1"})
        by_ms = int(time.time() * 1000) + DAY_MS
        asked = await show(
            "goal_request",
            "goal_request",
            {
                "goal": "ev_target",
                "car": "car1",
                "soc_permille": 900,
                "by_ms": by_ms,
                "note": "trip",
            },
        )
        if isinstance(asked, dict):  # this home's owner approves all (--approve-all)
            waiting = await console(console_port, {"op": "requests", "home": home, "all": True})
            decided = [w for w in waiting if w.get("reqId") == asked["reqId"]]
            state = decided[0].get("state") if decided else "unknown"
            lines.append(f"  the owner decides at home (the demo home approves all): {state}")
        await show("requests_list", "requests_list", {})
    return lines


async def listen_session(url: str, auth: Any, updates: int = 2) -> list[str]:
    """The assistant listens to the home's `live` resource (`subscriptions/listen`, 2026-07-28,
    docs/live.md) until `updates` updates came, reading it after each: the stream comes from the
    box's telemetry, so the reads are answered from the live feed, not the box. Returns the
    printed lines."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    lines: list[str] = []
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30.0))
    async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as c:
        listed = await c.list_resources()
        live = str(next(r for r in listed.resources if r.name == "live").uri)
        lines.append(f"[2026-07-28] the assistant listens to {live}:")
        async with c.listen(resource_subscriptions=[live]) as sub:
            async for _event in sub:
                read = await c.read_resource(live)
                lines.append(_summary("updated", json.loads(read.contents[0].text)))  # type: ignore[union-attr]
                if len(lines) > updates:
                    break
    return lines
