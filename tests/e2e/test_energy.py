"""`energy_report` and `charge_options` end to end: the official `mcp` client, the bridge on a
real port and a stub home in its own process, at chosen dates.

Each test moves both clocks to one instant: the bridge's by its injected clock and the home's
by its console's `clock {offsetMs}`, so the dates (a month with a daylight-saving change, a week
across a year end, a day with the stub's missing hour) mean the same whenever the test runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import trio

from ftwbridge.config import Config
from ftwbridge.run import Bridge, wall_ms
from stubbox.home import Home as SimHome

from .env import REAL_WAIT_S, Env, Home, now_ms

TZ = ZoneInfo("Europe/Stockholm")
HOUR = 3_600_000
DAY = 24 * HOUR
SCOPES = ["ftw.history.read", "ftw.assets.read", "ftw.plan.read"]


def local(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=TZ).timestamp() * 1000)  # type: ignore[misc]


class At:
    """A bridge and one stub home whose clocks both read `t_ms` when the test starts."""

    def __init__(self, env: Env, home: Home, token: str) -> None:
        self.env, self.home, self.token = env, home, token

    async def call(self, tool: str, args: dict[str, Any]) -> Any:
        async with self.env.http(self.token) as http, self.env.client(http, "2026-07-28") as c:
            with trio.fail_after(REAL_WAIT_S):
                return await c.call_tool(tool, args)


async def _at(nursery: trio.Nursery, tmp: Path, t_ms: int, days: int | None) -> At:
    offset = t_ms - now_ms()
    cfg = Config(
        state_dir=tmp,
        admin_bind="127.0.0.1:0",
        bind="127.0.0.1:0",
        door_bind="127.0.0.1:0",
        public_url="http://127.0.0.1:0",
    )
    bridge = Bridge(cfg, clock=lambda: wall_ms() + offset)
    await nursery.start(bridge.serve)
    env = Env(bridge, nursery)
    home = await env.add_home("h1")
    await home.console(op="clock", offsetMs=offset)
    caps = None if days is None else {"history_days": days}
    _key, _id, token = await env.agent(home, scopes=SCOPES, caps=caps)
    return At(env, home, token)


@pytest.fixture
async def at(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Any]:
    async def make(t_ms: int, days: int | None = 90) -> At:
        return await _at(nursery, tmp_path / f"b{t_ms}", t_ms, days)

    yield make
    nursery.cancel_scope.cancel()


def _ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_a_month_with_a_daylight_saving_change(at: Any) -> None:
    t = local(2026, 11, 5, 10)
    a = await at(t)
    out = _ok(
        await a.call("energy_report", {"period": "month", "count": 1, "end": local(2026, 10, 15)})
    )
    [october] = out["periods"]
    assert october["label"] == "October 2026" and not october["running"]
    assert october["endMs"] - october["startMs"] == (31 * 24 + 1) * HOUR
    want = SimHome(seed=1).energy(october["startMs"], october["startMs"] + 1, "month", t, 90)
    [b] = want["buckets"]
    assert october["figures"]["importKWh"] == round(b["importWh"] / 1000, 1)
    assert october["coveredMs"] == b["coveredMs"] < october["endMs"] - october["startMs"]
    assert "Imported" in out["summary"] and "October 2026" in out["summary"]
    running = _ok(await a.call("energy_report", {"period": "month"}))
    assert running["reads"] == 2
    now = running["periods"][-1]
    assert now["running"] and now["comparedWith"]["words"] == "the first 4 whole days of each"
    assert "same stretch of last month" in running["summary"]


async def test_a_week_across_a_year_end(at: Any) -> None:
    a = await at(local(2026, 1, 20, 12))
    out = _ok(await a.call("energy_report", {"period": "week", "end": local(2025, 12, 31, 12)}))
    before, week = out["periods"]
    assert week["label"] == "week 1 of 2026" and before["label"] == "week 52 of 2025"
    assert (week["startMs"], week["endMs"]) == (local(2025, 12, 29), local(2026, 1, 5))
    assert week["change"] is not None and "than last week" in out["summary"]


async def test_a_day_with_the_missing_hour(at: Any) -> None:
    sim = SimHome(seed=1)
    t = local(2026, 11, 20, 12)
    gap = next(h for h in range(t // HOUR - 9 * 24, t // HOUR) if sim.physics.missing(h))
    a = await at(t)
    out = _ok(await a.call("energy_report", {"period": "day", "count": 1, "end": gap * HOUR}))
    [day] = out["periods"]
    assert day["missingMs"] == HOUR and "the meters miss 1 h of it" in out["summary"]


async def test_a_report_before_history_days_is_refused_in_words(at: Any) -> None:
    t = local(2026, 11, 20, 12)
    a = await at(t, days=None)  # the default: 30 days
    result = await a.call("energy_report", {"period": "month", "count": 1, "end": t - 40 * DAY})
    assert result.is_error and "E_CAP_EXCEEDED" in result.content[0].text
    assert "30 days" in result.content[0].text


async def test_charging_advice(at: Any) -> None:
    t = int(datetime(2026, 11, 20, 19, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)
    a = await at(t)  # 19:00: the family car is home and plugged in
    reach = _ok(await a.call("charge_options", {"ready_by": t + 12 * HOUR, "target_percent": 90}))
    assert reach["status"] == "reachable" and reach["acts"] is False
    assert reach["advice"]["tool"] in ("goal_request", "ev_charge_now")
    assert reach["window"]["startMs"] >= t - 900_000 and reach["window"]["endMs"] <= t + 12 * HOUR
    short = _ok(await a.call("charge_options", {"ready_by": t + 1_800_000, "target_percent": 100}))
    assert short["status"] == "unreachable" and "cannot reach 100 %" in short["message"]
    met = _ok(await a.call("charge_options", {"ready_by": t + HOUR, "target_percent": 10}))
    assert met["status"] == "already_met" and "nothing to charge" in met["message"]
    away = _ok(await a.call("charge_options", {"car": "car2", "ready_by": t + HOUR}))
    assert away["status"] == "not_plugged"
