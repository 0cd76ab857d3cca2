"""`charge_options`: advice on charging a car by a time, from three reads; it never acts.

Reads `cars.get` (state of charge, `capacity_wh`), `config.get {section: loadpoints}` (the
charger's `max_power_w`) and `plan.get` (price slots, and solar where the plan carries it). The
energy needed is (target - soc) x capacity; the charger is taken to deliver its most power
into the battery (losses not counted, said in `assumptions`). The cheapest window is the run of
consecutive plan slots from now until `ready_by` that delivers the energy at the lowest import
price; `advice` is the exact `ev_charge_now` call (when that window starts now and fits one
hold) or `goal_request` with `ev_target` (the box's planner then picks the hours).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import Field

from ftwbridge.proto.names import Read

from .args import _Args
from .control_tools import CHARGER_PATTERN
from .energy_tools import Call, FlowContext

HOUR_MS: Final = 3_600_000


class ChargeArgs(_Args):
    """`charge_options`: reach `target_percent` on `car` by `ready_by` (ms since the epoch)."""

    car: str | None = Field(
        default=None, pattern=CHARGER_PATTERN, description="The car's id (default: a plugged car)"
    )
    ready_by: int = Field(
        ge=0, le=2**53 - 1, description="When it must be ready, ms since the epoch"
    )
    target_percent: int | None = Field(
        default=None, ge=1, le=100, description="Target charge in percent (default: the car's own)"
    )


def _slots(plan: Any, now_ms: int, ready_by: int) -> list[dict[str, Any]]:
    """Plan slots clipped to [now, ready_by): start, ms, price (minor/kWh), solar W or None."""
    out = []
    rows = plan.get("slots") if isinstance(plan, dict) else None
    for s in rows if isinstance(rows, list) else []:
        if not isinstance(s, dict) or not isinstance(s.get("startMs"), int):
            continue
        lo, hi = (
            max(now_ms, s["startMs"]),
            min(ready_by, s["startMs"] + int(s.get("durationMs") or 0)),
        )
        price = s.get("priceMinor")
        if hi > lo and isinstance(price, int):
            spare = (
                s.get("pvW") if isinstance(s.get("pvW"), int) else max(0, -int(s.get("gridW") or 0))
            )
            out.append({"startMs": lo, "ms": hi - lo, "price": price, "spareW": spare})
    return out


def cheapest_window(
    slots: list[dict[str, Any]], need_wh: int, power_w: int
) -> dict[str, Any] | None:
    """The consecutive slots that deliver `need_wh` at `power_w` for the least money.

    Returns `{startMs, endMs, costMinor}` (the last slot charged only as long as needed), or
    None when no run delivers it before the slots end.
    """
    best: dict[str, Any] | None = None
    for i in range(len(slots)):
        got, cost, t = 0.0, 0.0, slots[i]["startMs"]
        for s in slots[i:]:
            if s["startMs"] != t:
                break  # a hole in the plan
            take = min(s["ms"], (need_wh - got) / power_w * HOUR_MS)
            got += power_w * take / HOUR_MS
            cost += power_w * take / HOUR_MS / 1000 * s["price"]
            t = s["startMs"] + s["ms"]
            if got >= need_wh - 1e-6:
                end = int(s["startMs"] + take)
                if best is None or cost < best["costMinor"] - 1e-9:
                    best = {"startMs": slots[i]["startMs"], "endMs": end, "costMinor": cost}
                break
    if best is not None:
        best["costMinor"] = round(best["costMinor"])
    return best


def _pick(cars: Any, wanted: str | None) -> dict[str, Any] | str:
    rows = [
        c
        for c in (cars.get("cars") if isinstance(cars, dict) else None) or []
        if isinstance(c, dict)
    ]
    if wanted is not None:
        found = [c for c in rows if c.get("id") == wanted]
        known = ", ".join(str(c.get("id")) for c in rows) or "none"
        return found[0] if found else f"The home has no car {wanted}; its cars: {known}."
    plugged = [c for c in rows if c.get("plugged") is True]
    if plugged or rows:
        return (plugged or rows)[0]
    return "The home lists no cars."


def _charger(config: Any, car: str) -> tuple[str, int] | None:
    points = config.get("config") if isinstance(config, dict) else None
    rows = [(k, v) for k, v in (points or {}).items() if isinstance(v, dict)]
    mine = [r for r in rows if r[1].get("car") == car] or rows
    for key, row in mine:
        if isinstance(row.get("max_power_w"), int) and row["max_power_w"] > 0:
            return key, row["max_power_w"]
    return None


def _at(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True, slots=True)
class _Need:
    """A plugged car that needs `wh` (Wh) to go from `soc` to `target` (permille)."""

    cid: str
    name: str
    soc: int
    cap: int
    target: int
    wh: int
    base: dict[str, Any]


def _need(car: dict[str, Any] | str, args: ChargeArgs, now_ms: int) -> dict[str, Any] | _Need:
    """The result for a car that cannot be advised on (in words), or what it needs."""
    base: dict[str, Any] = {"car": args.car, "readyByMs": args.ready_by, "acts": False}
    if isinstance(car, str):
        return base | {"status": "no_car", "message": car}
    cid, name = str(car.get("id")), str(car.get("name") or car.get("id"))
    soc, cap = car.get("soc_permille"), car.get("capacity_wh")
    own = car.get("target_soc_permille")
    target = args.target_percent * 10 if args.target_percent else own or 1000
    base |= {
        "car": cid,
        "socPercent": soc / 10 if isinstance(soc, int) else None,
        "targetPercent": target / 10,
    }
    if car.get("plugged") is not True:
        return base | {
            "status": "not_plugged",
            "message": f"{name} is not plugged in; plug it in first.",
        }
    if not isinstance(cap, int) or not isinstance(soc, int):
        what = "battery capacity" if not isinstance(cap, int) else "state of charge"
        return base | {
            "status": "unknown_car",
            "message": f"The box does not know {name}'s {what}, so the energy needed cannot be worked out.",
        }
    wh = max(0, round((target - soc) * cap / 1000))
    base["needKWh"] = round(wh / 1000, 1)
    if wh == 0:
        return base | {
            "status": "already_met",
            "message": f"{name} is at {soc / 10:g} %, already at or above {target / 10:g} %; nothing to charge.",
        }
    if args.ready_by <= now_ms:
        return base | {"status": "unreachable", "message": "ready_by is not in the future."}
    return _Need(cid, name, soc, cap, target, wh, base)


def _call(
    n: _Need, window: dict[str, Any], lp: str, power: int, ready_by: int, now_ms: int, hold_s: int
) -> dict[str, Any]:
    """The exact tool call that would do it: a charge now that fits one hold, else the goal."""
    minutes = window["minutes"]
    if window["startMs"] <= now_ms + 60_000 and minutes <= hold_s // 60:
        return {
            "tool": "ev_charge_now",
            "arguments": {"charger": lp, "power_w": power, "minutes": minutes},
        }
    goal = {"goal": "ev_target", "car": n.cid, "soc_permille": n.target, "by_ms": ready_by}
    return {"tool": "goal_request", "arguments": goal}


def advise(
    cars: Any, config: Any, plan: Any, args: ChargeArgs, now_ms: int, hold_s: int = 900
) -> dict[str, Any]:
    """The `charge_options` result from the three answers (pure; see the module docstring).

    `hold_s` is the longest hold the grant allows (s): a window longer than that is advised as
    a `goal_request`, since one `ev_charge_now` could not cover it.
    """
    n = _need(_pick(cars, args.car), args, now_ms)
    if not isinstance(n, _Need):
        return n
    charger = _charger(config, n.cid)
    if charger is None:
        return n.base | {
            "status": "no_charger",
            "message": "The home's configuration names no charger power for this car.",
        }
    lp, power = charger
    slots = _slots(plan, now_ms, args.ready_by)
    hours = sum(s["ms"] for s in slots) / HOUR_MS
    solar = round(sum(min(s["spareW"], power) * s["ms"] / HOUR_MS for s in slots))
    base = n.base | {
        "charger": lp,
        "powerW": power,
        "hoursAvailable": round(hours, 2),
        "solarAloneKWh": round(min(solar, n.wh) / 1000, 1),
        "assumptions": "the charger's most power goes into the battery (losses not counted);"
        " solar alone is the surplus the plan would export (or its pvW) up to that power",
    }
    window = cheapest_window(slots, n.wh, power)
    if window is None:
        most = power * hours
        reach = min(1000, n.soc + most * 1000 / n.cap) / 10
        return base | {
            "status": "unreachable",
            "reachablePercent": round(reach, 1),
            "message": f"{n.name} cannot reach {n.target / 10:g} % by then: {power / 1000:g} kW for {hours:.1f} h gives {most / 1000:.1f} kWh of the {n.wh / 1000:.1f} kWh needed, about {reach:.0f} %.",
        }
    window["minutes"] = -(-(window["endMs"] - window["startMs"]) // 60_000)
    call = _call(n, window, lp, power, args.ready_by, now_ms, hold_s)
    return base | {
        "status": "reachable",
        "window": window,
        "cost": window["costMinor"] / 100,
        "advice": call,
        "message": f"{n.name} needs {n.wh / 1000:.1f} kWh to reach {n.target / 10:g} %; the cheapest {window['minutes']} minutes for it run from {_at(window['startMs'])} to {_at(window['endMs'])} and cost about {window['costMinor'] / 100:.2f} in the home's currency; this tool only advises, {call['tool']} would do it.",
    }


async def run_charge(call: Call, args: ChargeArgs, ctx: FlowContext) -> dict[str, Any]:
    """The `charge_options` result: `cars.get`, `config.get loadpoints`, `plan.get` (3 reads)."""
    cars = await call(Read.CARS_GET, None)
    config = await call(Read.CONFIG_GET, {"section": "loadpoints"})
    plan = await call(Read.PLAN_GET, None)
    return advise(cars.body, config.body, plan.body, args, ctx.now_ms, ctx.hold_s)
