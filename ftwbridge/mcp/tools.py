"""The 15 read tools of PROTOCOL.md parts D and G: arguments, the box reads each makes, result shapes.

Each `ToolSpec` names its typed arguments (pydantic, unknown fields refused), the box reads it
makes (so its scopes come from the contract's read table, never typed here), an output schema,
and `requests(args, now_ms)` / `shape(args, replies, ctx)` that build the box requests and turn
the answers into JSON-safe, cleaned `structuredContent`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ftwbridge.proto.clean import to_json
from ftwbridge.proto.history import unpack_history
from ftwbridge.proto.names import Read, Resolution, Scope
from ftwbridge.proto.registry import READS, RESOLUTIONS, limit
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from .args import (
    DAY_MS,
    HOUR_MS,
    ConfigArgs,
    DiagArgs,
    EventsArgs,
    HistoryArgs,
    LogsArgs,
    NoArgs,
    PlanArgs,
    _Args,
)
from .charge import CHARGE_OUTPUT, ChargeArgs, run_charge
from .energy_tools import REPORT_OUTPUT, Call, FlowContext, ReportArgs, run_report
from .identity import ICONS
from .schemas import OUTPUT_SCHEMAS


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool's shape may use besides the answers: the bridge's wall clock (ms)."""

    now_ms: int


Requests = Callable[[Any, int], list[Any]]
"""(args, now in ms since the epoch) -> the request body for each of the tool's reads, in order."""
Shape = Callable[[Any, list[Reply], ToolContext], dict[str, Any]]
Flow = Callable[[Call, Any, FlowContext], Awaitable[dict[str, Any]]]
"""(read caller, args, context) -> the result, for a tool whose reads follow its answers."""
Run = Callable[[TokenRecord, AgentGrant | None], dict[str, Any]]
"""A tool the bridge answers itself, from the caller's token and its grant in the newest
roster (None when the roster no longer lists it); it makes no box read."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One MCP tool: name, title, description, argument model, reads, and result building."""

    name: str
    title: str
    description: str
    args: type[_Args]
    reads: tuple[Read, ...]
    output: dict[str, Any]
    requests: Requests
    shape: Shape
    run: Run | None = None
    """Set for a tool the bridge answers itself (no reads); `requests` and `shape` are unused."""
    flow: Flow | None = None
    """Set for a tool that makes its own reads, each depending on the last (`energy_report`,
    `charge_options`): `requests` and `shape` are unused."""
    pick: Callable[[Any], tuple[Read, ...]] | None = None
    """Set for a tool whose reads depend on its arguments: the reads one call makes, drawn from
    `reads` (which lists them all, so `scopes` covers every call)."""

    def box_requests(self, args: Any, now_ms: int) -> list[tuple[Read, Any]]:
        """Each read this call makes with its request body (`now_ms`: ms since the epoch)."""
        reads = self.reads if self.pick is None else self.pick(args)
        assert set(reads) <= set(self.reads)
        return list(zip(reads, self.requests(args, now_ms), strict=True))

    @property
    def scopes(self) -> tuple[Scope, ...]:
        """The scopes a token needs for this tool (from the contract's read table)."""
        return tuple(dict.fromkeys(READS[r].scope for r in self.reads))

    def definition(self) -> dict[str, Any]:
        """The tool as listed by `tools/list`."""
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        schema.setdefault("properties", {})
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": schema,
            "outputSchema": OUTPUT_SCHEMAS.get(self.name, self.output),
            "icons": ICONS,
            "annotations": {
                "title": self.title,
                "readOnlyHint": True,
                "destructiveHint": False,
                "idempotentHint": True,
                "openWorldHint": False,
            },
        }


def _obj(*required: str, **props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": list(required),
    }


def _body(replies: list[Reply]) -> dict[str, Any]:
    value = to_json(replies[0].body)
    return value if isinstance(value, dict) else {"value": value}


def _bodies(body: Callable[[Any], Any] | None = None) -> Requests:
    """The one request body of a one-read tool: none, or `body(args)`."""
    return lambda args, now_ms: [None if body is None else body(args)]


def _plan_slots(plan: dict[str, Any], hours: int, now_ms: int) -> list[Any]:
    end = now_ms + hours * HOUR_MS
    slots = plan.get("slots")
    if not isinstance(slots, list):
        return []
    return [
        s
        for s in slots
        if isinstance(s, dict)
        and isinstance(s.get("startMs"), int)
        and s["startMs"] < end
        and s["startMs"] + int(s.get("durationMs", 0) or 0) > now_ms
    ]


def _plan_get(args: PlanArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    plan = _body(replies)
    return plan | {"slots": _plan_slots(plan, args.hours, ctx.now_ms), "hours": args.hours}


REASON_WORDS = {
    "cheap_import": "Power from the grid is cheap now, so the battery charges from it.",
    "expensive_import": "Power from the grid is expensive now, so the battery covers the house.",
    "solar_surplus": "The panels make more than the house uses; the surplus charges the battery.",
    "peak_shaving": "The battery keeps the grid draw under the import ceiling.",
    "reserve_held": "The battery keeps a reserve for later.",
    "export_paid": "Selling to the grid pays well now, so the battery exports.",
    "idle": "Nothing to gain now; the battery rests.",
}


def _plan_explain(args: PlanArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    plan, price = _body(replies[:1]), _body(replies[1:])
    slots = []
    for s in _plan_slots(plan, args.hours, ctx.now_ms):
        reason = s.get("reason")
        slots.append(
            s
            | {
                "why": REASON_WORDS.get(reason, "The plan gives no reason.")
                if isinstance(reason, str)
                else "The plan gives no reason."
            }
        )
    reasons: dict[str, int] = {}
    for s in slots:
        reasons[str(s.get("reason"))] = reasons.get(str(s.get("reason")), 0) + 1
    return {
        "hours": args.hours,
        "slots": slots,
        "reasons": reasons,
        "prices": price,
        "stale": bool(plan.get("stale")),
    }


def _history_requests(args: HistoryArgs, now_ms: int) -> list[Any]:
    span = args.span_ms()
    res = (
        Resolution.R_5M
        if span <= RESOLUTIONS[Resolution.R_5M].retention_days * DAY_MS
        else Resolution.R_1H
    )
    body = {
        "series": list(args.series),
        "res": res.value,
        "fromMs": now_ms - span,
        "toMs": now_ms,
        # The box plans strides over whole aligned tiles (upstream planQuery), so asking for
        # `points` would return fewer inside the range; ask for the most and thin here.
        "maxPoints": limit("history_points", "max"),
    }
    return [body]


def _history(args: HistoryArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    """`history_query`'s result: the box's points, or bucket means of them when the range
    holds more than `points` (`proto.history.unpack_history`). `fromMs`/`toMs` are the time
    the points cover and `stepMs` each point's width, so sum(value x stepMs) is the energy the
    box recorded over [fromMs, toMs) (W x ms; divide by 3.6e6 for Wh); `sourceStepMs` is the
    box's own step."""
    reply = replies[0]
    end = to_json(reply.body) if isinstance(reply.body, dict) else {}
    history = unpack_history(
        list(reply.chunks),
        from_ms=ctx.now_ms - args.span_ms(),
        to_ms=ctx.now_ms,
        points=args.points,
    )
    return {
        "range": args.range,
        "fromMs": history.from_ms,
        "toMs": history.to_ms,
        "res": end.get("resActual"),
        "stepMs": history.step_ms,
        "sourceStepMs": history.source_step_ms,
        "series": history.series,
        "gaps": end.get("gaps", []),
        "unit": "W (battery_soc in permille); each value is the mean over stepMs from its time",
    }


def _homes_list(token: TokenRecord, grant: AgentGrant | None) -> dict[str, Any]:
    home: dict[str, Any] = {
        "home": token.home,
        "agent": token.agent_id,
        "scopes": list(token.scopes),
    }
    if grant is not None:
        home |= {
            "name": grant.name,
            "client": grant.client,
            "ops": list(grant.ops),
            "caps": dict(grant.caps),
            "grantedScopes": list(grant.scopes),
            "expiresAtMs": grant.expires_at_ms,
        }
    return {"homes": [home]}


def _opt(args: _Args, *keys: str) -> dict[str, Any]:
    data = args.model_dump()
    return {k: data[k] for k in keys if data.get(k) is not None}


def _diag_needs_src(args: DiagArgs) -> bool:
    """The driver check names the driver in `src` (stubbox/home.py `diag`); without it the
    bridge reads `drivers.get` instead, to name the drivers there are."""
    return args.check == "driver" and args.src is None


def _diag_reads(args: DiagArgs) -> tuple[Read, ...]:
    return (Read.DRIVERS_GET,) if _diag_needs_src(args) else (Read.DIAG_RUN,)


def _diag_requests(args: DiagArgs, now_ms: int) -> list[Any]:
    return [None] if _diag_needs_src(args) else [_opt(args, "check", "src")]


def _diag(args: DiagArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    """The box's `diag` answer; for the driver check without `src`, a result that says `src`
    is needed and names the home's drivers (from its `drivers` answer), with `result`
    `needs_src` so no one takes it for a check that ran."""
    body = _body(replies)
    if not _diag_needs_src(args):
        return body
    rows = body.get("drivers")
    names = [
        d["name"]
        for d in (rows if isinstance(rows, list) else [])
        if isinstance(d, dict) and isinstance(d.get("name"), str)
    ]
    listed = ", ".join(names) if names else "none reported"
    return {
        "check": "driver",
        "result": "needs_src",
        "details": {
            "message": f"The driver check needs src, the name of one driver; this home's"
            f" drivers: {listed}.",
            "drivers": names,
        },
    }


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "homes_list",
        "Homes",
        "The home this assistant may read: its id, this agent, the scopes, operations and caps the owner granted, and when access ends (ms since the epoch).",
        NoArgs,
        (),
        _obj("homes", homes="array"),
        lambda a, n: [],
        lambda a, r, c: {},
        _homes_list,
    ),
    ToolSpec(
        "status",
        "Live status",
        "Live power flows now: grid (positive = import), solar, battery (positive = charging), house load and EV charging in W, battery state of charge in permille, and each source's freshness.",
        NoArgs,
        (Read.LIVE_GET,),
        _obj("fields", fields="object", sources="object"),
        _bodies(),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "chargers_list",
        "EV chargers",
        "The home's EV chargers: state, power in W, energy this session in Wh, the connected car and charging mode.",
        NoArgs,
        (Read.LOADPOINTS_GET,),
        _obj("loadpoints", loadpoints="array"),
        _bodies(),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "cars_list",
        "Cars",
        "The home's cars: state of charge in permille, range in km, whether plugged in, and the charge target.",
        NoArgs,
        (Read.CARS_GET,),
        _obj("cars", cars="array"),
        _bodies(),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "plan_get",
        "Battery plan",
        "The battery and grid plan for the next hours, in slots (start ms since the epoch, duration ms, battery W, grid W, import price in minor units per kWh, reason).",
        PlanArgs,
        (Read.PLAN_GET,),
        _obj("slots", slots="array", hours="integer"),
        _bodies(),
        _plan_get,
    ),
    ToolSpec(
        "plan_explain",
        "Why this plan",
        "The plan for the next hours with a plain-language reason per slot, a count of reasons, and the prices it follows.",
        PlanArgs,
        (Read.PLAN_GET, Read.PRICE_GET),
        _obj("slots", slots="array", reasons="object", prices="object"),
        lambda a, n: [None, {"fromMs": n, "toMs": n + a.hours * HOUR_MS}],
        _plan_explain,
    ),
    ToolSpec(
        "history_query",
        "History",
        "Stored history of power series (W; battery_soc in permille) over a range back from now, as [time ms, value or null] points, at most `points` per series. Each value is the mean over stepMs from its time (fewer points than the home stores are averaged, not sampled), so energy is the sum of value x stepMs.",
        HistoryArgs,
        (Read.HIST_QUERY,),
        _obj("series", series="object", gaps="array"),
        _history_requests,
        _history,
    ),
    ToolSpec(
        "health_get",
        "Health",
        "The box's health: overall status, uptime in ms, and each check.",
        NoArgs,
        (Read.HEALTH_GET,),
        _obj("status", status="string", checks="array"),
        _bodies(),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "events_list",
        "Events",
        "Recent events at the home, newest first, with cursors to page older (before) or newer (after).",
        EventsArgs,
        (Read.EVENTS_GET,),
        _obj("events", events="array", more="boolean"),
        _bodies(lambda a: _opt(a, "limit", "before", "after")),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "logs_tail",
        "Logs",
        "The box's latest log lines at a level and above, newest first, with cursors to page.",
        LogsArgs,
        (Read.LOGS_GET,),
        _obj("lines", lines="array", more="boolean"),
        _bodies(lambda a: _opt(a, "lines", "level", "before", "after")),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "drivers_status",
        "Drivers",
        "Each device driver's state, last good reading and errors in the last 24 h.",
        NoArgs,
        (Read.DRIVERS_GET,),
        _obj("drivers", drivers="array"),
        _bodies(),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "config_get",
        "Configuration",
        "One section of the home's configuration (never secrets).",
        ConfigArgs,
        (Read.CONFIG_GET,),
        _obj("section", section="string", config="object"),
        _bodies(lambda a: {"section": a.section}),
        lambda a, r, c: _body(r),
    ),
    ToolSpec(
        "diag_run",
        "Diagnostics",
        "Run one read-only diagnostic check at the box (clock, link, meter, planner, driver). The driver check needs src, a driver's name as drivers_status lists it; without it the answer names the drivers.",
        DiagArgs,
        (Read.DIAG_RUN, Read.DRIVERS_GET),
        _obj("result", check="string", result="string", details="object"),
        _diag_requests,
        _diag,
        pick=_diag_reads,
    ),
)
TOOLS += (
    ToolSpec(
        "energy_report",
        "Energy report",
        "Energy in kWh and money per day, week or month in the home's time zone, from the box's meters: import and export (counted apart), solar, self-consumption and self-sufficiency, EV, battery throughput, import cost and export value, and the change from the period before. A period still running is compared with the same stretch of the one before, and says so; incomplete meter coverage is stated, never averaged away. `summary` is one sentence to repeat.",
        ReportArgs,
        (Read.ENERGY_GET,),
        REPORT_OUTPUT,
        lambda a, n: [],
        lambda a, r, c: {},
        flow=run_report,
    ),
    ToolSpec(
        "charge_options",
        "Charging advice",
        "Advice for charging a car by a time (ready_by, ms since the epoch): the energy needed for the target, whether it can be reached, the cheapest window in the plan's prices and its cost, what spare solar alone would give, and the exact ev_charge_now or goal_request call that would do it. It only reads and advises; it never starts a charge.",
        ChargeArgs,
        (Read.CARS_GET, Read.CONFIG_GET, Read.PLAN_GET),
        CHARGE_OUTPUT,
        lambda a, n: [],
        lambda a, r, c: {},
        flow=run_charge,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {t.name: t for t in TOOLS}
