"""The tools' output schemas, generated from typed result models.

Each model is the `structuredContent` a tool returns: the box's answer body (PROTOCOL.md part
B; `contract/agents.yaml` `answers`) as the bridge translates it, or what the bridge makes
itself (`homes_list`, `plan_explain`, `history_query`; `energy_report` and `charge_options`,
from part G and three reads: docs/energy.md). Units are in the field names and said in each
description (W, Wh, kWh, permille, percent, ms since the epoch, ms); signs follow the box's
convention (positive grid = import, positive battery = charging). Models allow fields they do
not name, so a box that adds one is not refused by a client that validates. `OUTPUT_SCHEMAS`
holds each model's JSON Schema with its `$defs` inlined, as MCP clients expect a
self-contained object schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .energy_schemas import ChargeOptions, Report
from .schema_base import MS
from .schema_base import Open as _Open


class Grant(_Open):
    home: str = Field(description="The home's id")
    agent: str = Field(description="This assistant's agent id in the home's roster")
    name: str = Field(description="The name the owner approved it under")
    client: str = Field(description="The OAuth client the grant is for")
    scopes: list[str] = Field(description="The scopes this token carries")
    grantedScopes: list[str] = Field(description="Every scope the owner granted")
    ops: list[str] = Field(description="The control operations the owner granted")
    caps: dict[str, int] = Field(
        description="Caps the owner set (counts, seconds or days, as each name says)"
    )
    expiresAtMs: int = Field(description=f"When the grant ends, {MS}")


class Homes(_Open):
    homes: list[Grant] = Field(description="The home this token reads, with its grant")


class Fields(_Open):
    grid_w: int = Field(description="Grid power in W; positive = import, negative = export")
    pv_w: int = Field(description="Solar power in W (0 or more)")
    battery_w: int = Field(
        description="Battery power in W; positive = charging, negative = discharging"
    )
    battery_soc: int = Field(description="Battery state of charge in permille (0 to 1000)")
    load_w: int = Field(description="House consumption in W")
    ev_w: int | None = Field(
        default=None, description="EV charging power in W, when the box has a charger"
    )


class Source(_Open):
    kind: str = Field(description="meter, inverter, battery or charger")
    name: str
    lastOkMs: int = Field(
        description="Box uptime in ms at the source's last good reading (0: never)"
    )
    staleAfterMs: int = Field(description="How long a reading stays fresh, ms")
    state: str = Field(description="live, lagging, stale, down or never")


class Status(_Open):
    uptimeMs: int = Field(description="The box's uptime, ms")
    nowMs: int | None = Field(default=None, description=f"The box's wall clock, {MS}")
    controlRev: int = Field(description="Revision of the box's control state")
    mode: str = Field(description="The site's mode")
    fields: Fields = Field(description="Live power flows now")
    sources: dict[str, Source] = Field(description="Each source by its id, with its freshness")
    dispatchBlockedBy: list[str] = Field(description="Why commands are refused now; empty: none")


class Hold(_Open):
    power_w: int = Field(description="Charging power held, W")
    untilMs: int = Field(description=f"When the hold ends, {MS}")


class Loadpoint(_Open):
    id: str
    name: str
    state: str = Field(description="charging, connected, idle or fault")
    power_w: int = Field(description="Charging power now, W")
    session_wh: int = Field(description="Energy this session, Wh")
    car: str | None = Field(description="The connected car's id, or null")
    mode: str = Field(description="Charging mode")
    hold: Hold | None = Field(description="An assistant's charge now (ev_charge_now), or null")


class Chargers(_Open):
    loadpoints: list[Loadpoint]


class Car(_Open):
    id: str
    name: str
    soc_permille: int | None = Field(description="State of charge in permille, or null")
    range_km: int | None = Field(description="Range in km, or null")
    plugged: bool
    target_soc_permille: int | None = Field(description="Charge target in permille, or null")
    capacity_wh: int | None = Field(
        default=None, description="Usable battery capacity, Wh, or null"
    )


class Cars(_Open):
    cars: list[Car]


class Slot(_Open):
    startMs: int = Field(description=f"Slot start, {MS}")
    durationMs: int = Field(description="Slot length, ms")
    batteryW: int = Field(description="Planned battery power, W; positive = charging")
    gridW: int = Field(description="Planned grid power, W; positive = import")
    priceMinor: int | None = Field(description="Import price, minor currency units per kWh")
    reason: str = Field(description="Why the planner chose this slot's power")


class Plan(_Open):
    slots: list[Slot]
    hours: int | None = Field(default=None, description="Hours of plan asked for")
    rev: int | None = Field(default=None, description="Plan revision")
    stale: bool | None = Field(default=None, description="True when the plan is out of date")
    ceilingW: int | None = Field(default=None, description="Grid import ceiling, W, or null")


class ExplainedSlot(Slot):
    why: str = Field(description="The slot's reason in plain words")


class PriceSlot(_Open):
    startMs: int = Field(description=f"Price period start, {MS}")
    durationMs: int = Field(description="Price period length, ms")
    spotMinor: int | None = Field(default=None, description="Spot price, minor units per kWh")
    totalMinor: int | None = Field(
        default=None, description="Total import price, minor units per kWh"
    )


class Prices(_Open):
    zone: str | None = None
    currency: str | None = None
    slots: list[PriceSlot]


class Explained(_Open):
    hours: int = Field(description="Hours of plan explained")
    slots: list[ExplainedSlot]
    reasons: dict[str, int] = Field(description="How many slots each reason covers")
    prices: Prices | None = Field(default=None, description="The prices the plan used")
    stale: bool | None = None


class History(_Open):
    range: str | None = Field(default=None, description="The range asked for, such as 24h")
    fromMs: int = Field(description=f"First point's time, {MS}")
    toMs: int = Field(description=f"Range end, {MS}")
    stepMs: int = Field(description="Time between points, ms")
    series: dict[str, list[list[int | float | None]]] = Field(
        description="Each series by name: [time ms since the epoch, mean value over stepMs]"
        " points; W, battery_soc in permille"
    )
    unit: str | None = Field(default=None, description="The values' units in words")


class Check(_Open):
    name: str
    state: str = Field(description="ok, warn or fail")
    detail: str


class Health(_Open):
    status: str = Field(description="ok, degraded or down")
    uptimeMs: int = Field(description="The box's uptime, ms")
    checks: list[Check]


class Event(_Open):
    cursor: str = Field(description="Page from here with before/after")
    atMs: int = Field(description=f"When it happened, {MS}")
    level: str = Field(description="info, warn or error")
    kind: str
    text: str


class Events(_Open):
    events: list[Event] = Field(description="Newest first")
    more: bool = Field(description="True when older events are left")


class LogLine(_Open):
    cursor: str
    atMs: int = Field(description=f"When it was written, {MS}")
    level: str = Field(description="debug, info, warn or error")
    src: str = Field(description="The driver or part that wrote it")
    text: str


class Logs(_Open):
    lines: list[LogLine] = Field(description="Newest first")
    more: bool


class Driver(_Open):
    name: str
    kind: str
    state: str = Field(description="live, lagging, stale, down or never")
    lastOkMs: int = Field(description="Box uptime in ms at its last good reading")
    errors24h: int = Field(description="Errors in the last 24 h")


class Drivers(_Open):
    drivers: list[Driver]


class ConfigSection(_Open):
    section: str = Field(description="site, battery, loadpoints, tariff or planner")
    config: dict[str, Any] = Field(description="The section's keys and values; never a secret")


class Diagnostic(_Open):
    check: str = Field(description="clock, link, meter, planner or driver")
    result: str = Field(description="pass, warn or fail")
    details: dict[str, Any] = Field(description="What the check found; units in the key names")


class CommandResult(_Open):
    cmdId: str = Field(description="The command's id; the same id asked again acts no second time")
    state: str = Field(description="applied, rejected, expired, superseded or unconfirmed")
    charger: str = Field(description="The charger's id")
    observed: dict[str, Any] | None = Field(
        default=None, description="What the charger does now, as the box reads it (W, ms)"
    )
    holdEndsAtMs: int | None = Field(default=None, description=f"When the hold ends, {MS}")
    message: str | None = Field(default=None, description="What happened, in words")


class GoalQueued(_Open):
    reqId: str = Field(description="The request's id; requests_list shows its decision")
    expiresAtMs: int = Field(description=f"When an unanswered request expires, {MS}")
    decidedBy: str = Field(description="Who decides: the home's owner, at home")
    message: str | None = None


class OwnerRequest(_Open):
    reqId: str
    goal: str = Field(description="ev_target or site_mode")
    args: dict[str, Any] = Field(description="What was asked; units in the key names")
    note: str | None = None
    state: str = Field(description="pending, approved, denied or expired")
    atMs: int = Field(description=f"When it was asked, {MS}")
    decidedAtMs: int | None = Field(default=None, description=f"When the owner decided, {MS}")


class OwnerRequests(_Open):
    requests: list[OwnerRequest] = Field(description="The last 30 days, newest first")


MODELS: dict[str, type[BaseModel]] = {
    "ev_charge_now": CommandResult,
    "ev_stop": CommandResult,
    "goal_request": GoalQueued,
    "requests_list": OwnerRequests,
    "homes_list": Homes,
    "status": Status,
    "chargers_list": Chargers,
    "cars_list": Cars,
    "plan_get": Plan,
    "plan_explain": Explained,
    "history_query": History,
    "health_get": Health,
    "events_list": Events,
    "logs_tail": Logs,
    "drivers_status": Drivers,
    "config_get": ConfigSection,
    "diag_run": Diagnostic,
    "energy_report": Report,
    "charge_options": ChargeOptions,
}
"""The result model of each tool."""


def _inline(node: Any, defs: dict[str, Any], *, names: bool = False) -> Any:
    """`node` with every `$ref` to `#/$defs/X` replaced by X itself (no model here refers to
    itself), and pydantic's `title`s and `null` defaults dropped (a result's member is sent
    or not; an output schema has no default). `names`: `node` is a `properties` map, whose
    keys are field names, kept whatever they are."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            merged = dict(defs[ref.removeprefix("#/$defs/")]) | {
                k: v for k, v in node.items() if k != "$ref"
            }
            return _inline(merged, defs)
        return {
            k: _inline(v, defs, names=k == "properties" and not names)
            for k, v in node.items()
            if names or not (k in ("title", "$defs") or (k == "default" and v is None))
        }
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON Schema (serialization mode), self-contained."""
    schema = model.model_json_schema(mode="serialization")
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {n: output_schema(m) for n, m in MODELS.items()}
