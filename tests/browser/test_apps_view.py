"""The home view (MCP Apps, docs/apps.md) as a host runs it: the test host of peers/apps_host
(the official TypeScript client and ext-apps' own AppBridge, bundled so it works offline) in
Debian's Chromium, against a live bridge and a stub home whose clock the test freezes.

The view initialises, renders the stub's own watts, state of charge, chargers and plan, follows
a change of the stub's physics, shows a stale source as stale (never as a number), asks the
assistant for a charge with `ui/message` (no control tool called), makes no request of its own
(a fetch from it is refused by the CSP the host built from `_meta.ui`), stops polling on
teardown, and renders dark at 360 px. Screenshots go to the test's folder, or to
`$FTW_APPS_SHOTS` (docs/ keeps the ones made so).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from ftwbridge.mcp import apps
from tests.browser.test_consent import run_driver
from tests.e2e.env import CONTROL_NAMES, REAL_WAIT_S, Env, now_ms
from tests.oauth.helpers import serve_tiny_http

HERE = Path(__file__).parent
PEERS = HERE.parents[1] / "peers"
HOUR_MS = 3_600_000


async def bundle_host(out: Path) -> None:
    node = PEERS / "node_modules" / ".bin" / "node"
    if not (PEERS / "node_modules" / "@modelcontextprotocol" / "ext-apps").exists():
        pytest.fail("peers/node_modules lacks @modelcontextprotocol/ext-apps: make peers")
    with trio.fail_after(REAL_WAIT_S):
        done = await trio.run_process(
            [str(node), str(PEERS / "apps_host" / "bundle.mjs"), str(PEERS), str(out)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def minute_ok(ms: int) -> int:
    """`ms` moved off the minutes in which the stub's charger lags (one in 47)."""
    return ms + 60_000 if (ms // 60_000) % 47 == 0 else ms


async def status_at(env: Env, home: Any, token: str, frozen_ms: int) -> dict[str, int]:
    await home.console(op="clock", frozenMs=frozen_ms)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        result = await client.call_tool("status", {})
    assert result.structured_content is not None
    return dict(result.structured_content["fields"])


async def energy_at(env: Env, token: str) -> dict[str, Any]:
    """The last period of today's `energy_report`, as the view asks for it."""
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        result = await client.call_tool("energy_report", {"period": "day", "count": 1})
    assert result.structured_content is not None, result
    return dict(result.structured_content["periods"][-1])


async def test_the_view_renders_the_stub_home_live(
    env: Env, tmp_path: Path, nursery: trio.Nursery
) -> None:
    await bundle_host(tmp_path / "host.js")
    files = {"/host.js": (tmp_path / "host.js", "text/javascript")}
    index = (PEERS / "apps_host" / "index.html").read_bytes()

    def answer(path: str) -> tuple[bytes, str]:
        if path in files:
            return files[path][0].read_bytes(), files[path][1]
        return index, "text/html; charset=utf-8"

    host = f"http://127.0.0.1:{await serve_tiny_http(nursery, answer)}"
    env.bridge.site.allowed_origins.add(host)
    home = await env.add_home("h1")
    _, _, token = await env.agent(home)
    # near the bridge's own clock: plan_get keeps the slots from the bridge's now on
    first_ms = minute_ok(now_ms() // 60_000 * 60_000)
    second_ms = minute_ok(first_ms + 6 * HOUR_MS)
    second = await status_at(env, home, token, second_ms)
    first = await status_at(env, home, token, first_ms)
    energy = await energy_at(env, token)
    shots = Path(os.environ.get("FTW_APPS_SHOTS") or tmp_path)
    cfg = {
        "host": host,
        "mcp": env.url,
        "token": token,
        "console": home.console_port,
        "home": home.name,
        "first": first,
        "second": second,
        "secondMs": second_ms,
        "energy": energy,
        "shots": str(shots),
    }
    seen = await run_driver("drive_apps_view.py", json.dumps(cfg))
    assert "error" not in seen, seen["error"]
    tools = {t["name"]: t["ui"] for t in seen["host"]["tools"]}
    assert tools["status"] == {"resourceUri": apps.VIEW_URI}
    assert tools[apps.LIVE_TOOL]["visibility"] == ["app"]
    assert "connect-src 'none'" in seen["host"]["csp"]
    assert seen["host"]["bytes"] == len(apps.view_html().encode())
    assert seen["first_ok"], seen["first"]
    still = seen["still_live"]
    assert still["shown"] == still["want"], still  # a fed answer's lastOkMs is not a stale source
    want = seen["energy"]["want"]
    assert seen["energy"]["shown"] == want, seen["energy"]
    assert want["importKWh"].endswith(" kWh")
    if energy["figures"]["selfSufficiencyPercent"] is None:  # just past the home's midnight
        assert want["selfSufficiencyPercent"] == "\u2013", want  # no use yet: no figure, a dash
    else:
        assert want["selfSufficiencyPercent"].endswith(" %"), want
    assert want["importCost"].endswith(" " + energy["figures"]["currency"]), want
    assert seen["energy_head"].startswith("Today") and energy["label"] in seen["energy_head"]
    assert seen["soc"] == f"{first['battery_soc'] / 10:.1f} %"
    assert seen["bars"] >= 40 and seen["reasons"], seen  # 48 quarter hours of prices
    assert any(words in " ".join(seen["reasons"]) for words in apps.REASON_WORDS.values())
    assert "Garage charger" in seen["chargers"] and "Europe/Stockholm" in seen["read"]
    assert seen["second_ok"], seen["second"]
    assert seen["stale_ok"] and "stale" in seen["stale_row"], seen
    (message,) = seen["messages"]
    assert message["role"] == "user" and "charging" in message["content"][0]["text"]
    assert not set(seen["calls"]) & set(CONTROL_NAMES), seen["calls"]
    assert apps.LIVE_TOOL in seen["calls"]
    assert seen["frame_requests"] == [] and seen["foreign"] == [], seen
    assert seen["frame_fetch"].startswith("blocked"), seen["frame_fetch"]
    assert any("Content Security Policy" in line for line in seen["console"]), seen["console"]
    assert seen["context_and_cancel"]
    assert seen["after_teardown"] == [True, True]
    assert seen["polls_after_teardown"] == 0
    assert seen["frames_left"] == 0
    dark = seen["dark"]
    assert dark["theme"] == "dark" and dark["scrollWidth"] <= 360, dark
    red, green, blue = (int(v) for v in dark["bg"].removeprefix("rgb(").rstrip(")").split(","))
    assert red + green + blue < 200, dark
    for name in ("apps-light.png", "apps-stale.png", "apps-dark-360.png"):
        assert (shots / name).stat().st_size > 5_000
