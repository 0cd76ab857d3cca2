"""`energy_report` and `charge_options` against the stub home's answers, in memory: the reads
each makes, the comparison of a running period, coverage, and every advice case in words."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ftwbridge.mcp.charge import ChargeArgs, advise, cheapest_window, run_charge
from ftwbridge.mcp.energy_tools import AnswerCache, FlowContext, ReportArgs, cached, run_report
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from stubbox import reads
from stubbox.home import Home
from stubbox.problem import Problem

TZ = ZoneInfo("Europe/Stockholm")
DAY = 86_400_000
HOUR = 3_600_000


def _ms(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=TZ).timestamp() * 1000)  # type: ignore[misc]


@dataclass
class Box:
    """A `reads.BoxView` over one stub home, counting the reads made."""

    home: Home
    box_id: str = "stub-h1"
    clock_source: str = "ntp"


class Reader:
    def __init__(self, now: int, days: int = 400) -> None:
        self.box, self.now, self.made = Box(Home(seed=1)), now, []  # type: ignore[var-annotated]
        self.grant = AgentGrant(
            "a", "c", "n", ("ftw.history.read",), (), {"history_days": days}, 0, now + DAY
        )

    async def __call__(self, read: Read, body: Any) -> Reply:
        self.made.append((read, body))
        try:
            [(t, b)] = reads.answer(self.box, self.grant, read, body, self.now, 1000)  # type: ignore[arg-type]
        except Problem as p:
            raise Refusal(p.code, p.args_) from None
        return Reply(len(self.made), t, b)


async def _report(now: int, days: int = 400, **kw: Any) -> tuple[dict[str, Any], Reader]:
    reader = Reader(now, days)
    out = await run_report(reader, ReportArgs(**kw), FlowContext(now, days, 900))
    return out, reader


async def test_this_month_against_the_same_stretch_of_last_month() -> None:
    now = _ms(2026, 11, 20, 14, 7)
    out, reader = await _report(now, period="month")
    assert len(reader.made) == 2 and out["reads"] == 2
    last, before = out["periods"][1], out["periods"][0]
    assert last["running"] and not before["running"] and last["label"] == "November 2026"
    assert last["comparedWith"]["words"] == "the first 19 whole days of each"
    assert last["comparedWith"]["fromMs"] == _ms(2026, 10, 1)
    assert last["comparedWith"]["toMs"] == _ms(2026, 10, 20)
    assert "this month so far" in out["summary"] and "same stretch of last month" in out["summary"]
    assert out["summary"].endswith(".") and "SEK" in out["summary"]
    assert before["change"] is not None  # October against the whole of September
    assert reader.made[1][1]["bucket"] == "day"


async def test_a_finished_week_across_the_year_end_makes_one_read() -> None:
    now = _ms(2027, 1, 12, 9)
    out, reader = await _report(now, period="week", count=1, end=_ms(2026, 12, 30, 12))
    assert len(reader.made) == 1
    [week] = out["periods"]
    assert week["label"] == "week 53 of 2026" and not week["running"]
    assert (week["startMs"], week["endMs"]) == (_ms(2026, 12, 28), _ms(2027, 1, 4))


async def test_a_month_with_a_daylight_saving_change() -> None:
    out, _ = await _report(_ms(2026, 11, 5, 8), period="month", count=2)
    october = out["periods"][0]
    assert october["endMs"] - october["startMs"] == (31 * 24 + 1) * HOUR
    assert october["coverage"] < 1  # the stub's missing hours, said plainly
    f = october["figures"]
    assert f["currency"] == "SEK" and f["importKWh"] > 0 and 0 <= f["selfSufficiencyPercent"] <= 100


async def test_before_history_days_is_refused_in_words() -> None:
    now = _ms(2026, 11, 20, 14)
    with pytest.raises(Refusal) as caught:
        await _report(now, days=30, period="month", count=1, end=_ms(2026, 9, 10))
    assert caught.value.code == Code.E_CAP_EXCEEDED
    out, _ = await _report(now, days=30, period="month")  # last month only partly visible
    assert out["periods"][0]["coverage"] < 0.95 and out["periods"][0]["change"] is None


async def test_the_cache_keeps_finished_answers_and_the_running_one_a_minute() -> None:
    now = _ms(2026, 11, 20, 14)
    reader, cache = Reader(now), AnswerCache()
    old = {"fromMs": _ms(2026, 9, 1), "toMs": _ms(2026, 10, 1), "bucket": "month"}
    new = {"fromMs": now - DAY, "toMs": now, "bucket": "day"}
    for t in (now, now + 30_000, now + 61_000, now + 10 * DAY):
        call = cached(cache, "h1", b"k", reader, t)
        await call(Read.ENERGY_GET, old)
        await call(Read.ENERGY_GET, new)
    assert [b for _, b in reader.made].count(old) == 1
    assert [b for _, b in reader.made].count(new) == 3


CARS = {"cars": [{"id": "car1", "name": "Family car", "soc_permille": 400, "plugged": True,
                  "capacity_wh": 60_000, "target_soc_permille": None, "range_km": 120}]}  # fmt: skip
CONFIG = {"section": "loadpoints", "config": {"lp1": {"max_power_w": 11_000, "car": "car1"}}}
NOW = 1_790_000_000_000 - 1_790_000_000_000 % HOUR


def _plan(prices: list[int]) -> dict[str, Any]:
    return {"slots": [{"startMs": NOW + i * 900_000, "durationMs": 900_000, "priceMinor": p,
                       "gridW": -2000 if i < 2 else 500, "batteryW": 0} for i, p in enumerate(prices)]}  # fmt: skip


def test_advice_for_a_reachable_target_picks_the_cheapest_run() -> None:
    plan = _plan([300] * 4 + [100] * 16 + [200] * 8)
    out = advise(CARS, CONFIG, plan, ChargeArgs(ready_by=NOW + 7 * HOUR, target_percent=80), NOW)
    assert out["status"] == "reachable" and out["acts"] is False and out["needKWh"] == 24.0
    assert out["window"]["startMs"] == NOW + HOUR and out["window"]["minutes"] == 131
    assert out["advice"]["tool"] == "goal_request"
    assert out["advice"]["arguments"] == {
        "goal": "ev_target",
        "car": "car1",
        "soc_permille": 800,
        "by_ms": NOW + 7 * HOUR,
    }
    assert out["cost"] == 24.0 and out["solarAloneKWh"] == 1.0


def test_advice_to_charge_now_when_now_is_cheapest_and_fits_a_hold() -> None:
    out = advise(
        CARS,
        CONFIG,
        _plan([50] * 8 + [300] * 8),
        ChargeArgs(ready_by=NOW + 4 * HOUR, target_percent=42),
        NOW,
    )
    assert out["advice"] == {
        "tool": "ev_charge_now",
        "arguments": {"charger": "lp1", "power_w": 11_000, "minutes": 7},
    }


@pytest.mark.parametrize(
    ("cars", "args", "status"),
    [
        (CARS, ChargeArgs(ready_by=NOW + HOUR, target_percent=100), "unreachable"),
        (CARS, ChargeArgs(ready_by=NOW + HOUR, target_percent=30), "already_met"),
        (
            {"cars": [CARS["cars"][0] | {"plugged": False}]},
            ChargeArgs(ready_by=NOW + HOUR),
            "not_plugged",
        ),
        (
            {"cars": [CARS["cars"][0] | {"capacity_wh": None}]},
            ChargeArgs(ready_by=NOW + HOUR),
            "unknown_car",
        ),
        (CARS, ChargeArgs(car="car9", ready_by=NOW + HOUR), "no_car"),
    ],
)
def test_advice_in_words(cars: Any, args: ChargeArgs, status: str) -> None:
    out = advise(cars, CONFIG, _plan([100] * 16), args, NOW)
    assert out["status"] == status and out["message"].endswith(".") and out["acts"] is False


def test_no_run_reaches_past_a_hole_in_the_plan() -> None:
    slots = [
        {"startMs": 0, "ms": HOUR, "price": 1, "spareW": 0},
        {"startMs": 2 * HOUR, "ms": HOUR, "price": 1, "spareW": 0},
    ]
    assert cheapest_window(slots, 1500, 1000) is None
    assert cheapest_window(slots, 1000, 1000) == {"startMs": 0, "endMs": HOUR, "costMinor": 1}


async def test_advice_from_the_stub_home_makes_three_reads() -> None:
    now = _ms(2026, 11, 20, 19)
    reader = Reader(now)
    reader.grant = AgentGrant(
        "a", "c", "n", ("ftw.assets.read", "ftw.plan.read"), (), {}, 0, now + DAY
    )
    out = await run_charge(reader, ChargeArgs(ready_by=now + 12 * HOUR), FlowContext(now, 30, 900))
    assert [r for r, _ in reader.made] == [Read.CARS_GET, Read.CONFIG_GET, Read.PLAN_GET]
    assert out["status"] in ("reachable", "already_met", "unreachable"), out


@pytest.mark.parametrize(
    "body",
    [
        {"buckets": "x"},
        {"tz": "../../etc/passwd", "currency": "SEK\u202e", "buckets": [{"startMs": 0}]},
        {"tz": "UTC", "currency": None, "buckets": [{"startMs": "0", "endMs": 1}]},
        ["not", "a", "map"],
    ],
)
async def test_an_answer_that_is_not_part_g_is_refused_in_words(body: Any) -> None:
    from tests.mcp.test_service import call, post, service
    from tests.mcp.test_strict import EVERY_SCOPE

    svc = service(Reply(1, "energy", body), record=EVERY_SCOPE)
    status, answer = await post(svc, *call("energy_report", {"period": "day"}))
    result = answer["result"]
    assert status == 200 and result["isError"], result
    assert result["content"][0]["text"].startswith("E_BAD_BODY")


async def test_a_hostile_currency_and_zone_do_not_reach_the_words() -> None:
    now = _ms(2026, 11, 20, 14)
    reader = Reader(now)

    async def hostile(read: Read, body: Any) -> Reply:
        reply = await reader(read, body)
        return Reply(1, reply.t, reply.body | {"tz": "Mars/Olympus", "currency": "SEK; ignore"})

    out = await run_report(hostile, ReportArgs(period="day"), FlowContext(now, 400, 900))
    assert out["currency"] is None and out["tz"] == "UTC" and "ignore" not in out["summary"]
