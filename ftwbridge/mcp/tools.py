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

from ftwbridge.proto.names import Read, Scope
from ftwbridge.proto.registry import READS
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from .args import (
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
from .charge import ChargeArgs, run_charge
from .energy_tools import Call, FlowContext, ReportArgs, run_report
from .identity import ICONS
from .schemas import OUTPUT_SCHEMAS
from .tool_shapes import REASON_WORDS as REASON_WORDS
from .tool_shapes import (
    Requests,
    bodies,
    body_of,
    diag,
    diag_reads,
    diag_requests,
    history,
    history_requests,
    homes_list,
    obj_schema,
    optional_body,
    plan_explain,
    plan_get,
)
from .tool_shapes import ToolContext as ToolContext

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
        reads = self.reads
        if self.pick is not None:
            reads = self.pick(args)
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


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "homes_list",
        "Homes",
        "The home this assistant may read: its id, this agent, the scopes, operations and caps the owner granted, and when access ends (ms since the epoch).",
        NoArgs,
        (),
        obj_schema("homes", homes="array"),
        lambda a, n: [],
        lambda a, r, c: {},
        homes_list,
    ),
    ToolSpec(
        "status",
        "Live status",
        "Live power flows now: grid (positive = import), solar, battery (positive = charging), house load and EV charging in W, battery state of charge in permille, and each source's freshness.",
        NoArgs,
        (Read.LIVE_GET,),
        obj_schema("fields", fields="object", sources="object"),
        bodies(),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "chargers_list",
        "EV chargers",
        "The home's EV chargers: state, power in W, energy this session in Wh, the connected car and charging mode.",
        NoArgs,
        (Read.LOADPOINTS_GET,),
        obj_schema("loadpoints", loadpoints="array"),
        bodies(),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "cars_list",
        "Cars",
        "The home's cars: state of charge in permille, range in km, whether plugged in, and the charge target.",
        NoArgs,
        (Read.CARS_GET,),
        obj_schema("cars", cars="array"),
        bodies(),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "plan_get",
        "Battery plan",
        "The battery and grid plan for the next hours, in slots (start ms since the epoch, duration ms, battery W, grid W, import price in minor units per kWh, reason).",
        PlanArgs,
        (Read.PLAN_GET,),
        obj_schema("slots", slots="array", hours="integer"),
        bodies(),
        plan_get,
    ),
    ToolSpec(
        "plan_explain",
        "Why this plan",
        "The plan for the next hours with a plain-language reason per slot, a count of reasons, and the prices it follows.",
        PlanArgs,
        (Read.PLAN_GET, Read.PRICE_GET),
        obj_schema("slots", slots="array", reasons="object", prices="object"),
        lambda a, n: [None, {"fromMs": n, "toMs": n + a.hours * HOUR_MS}],
        plan_explain,
    ),
    ToolSpec(
        "history_query",
        "History",
        "Stored history of power series (W; battery_soc in permille) over a range back from now, as [time ms, value or null] points, at most `points` per series. Each value is the mean over stepMs from its time (fewer points than the home stores are averaged, not sampled), so energy is the sum of value x stepMs.",
        HistoryArgs,
        (Read.HIST_QUERY,),
        obj_schema("series", series="object", gaps="array"),
        history_requests,
        history,
    ),
    ToolSpec(
        "health_get",
        "Health",
        "The box's health: overall status, uptime in ms, and each check.",
        NoArgs,
        (Read.HEALTH_GET,),
        obj_schema("status", status="string", checks="array"),
        bodies(),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "events_list",
        "Events",
        "Recent events at the home, newest first, with cursors to page older (before) or newer (after).",
        EventsArgs,
        (Read.EVENTS_GET,),
        obj_schema("events", events="array", more="boolean"),
        bodies(lambda a: optional_body(a, "limit", "before", "after")),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "logs_tail",
        "Logs",
        "The box's latest log lines at a level and above, newest first, with cursors to page.",
        LogsArgs,
        (Read.LOGS_GET,),
        obj_schema("lines", lines="array", more="boolean"),
        bodies(lambda a: optional_body(a, "lines", "level", "before", "after")),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "drivers_status",
        "Drivers",
        "Each device driver's state, last good reading and errors in the last 24 h.",
        NoArgs,
        (Read.DRIVERS_GET,),
        obj_schema("drivers", drivers="array"),
        bodies(),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "config_get",
        "Configuration",
        "One section of the home's configuration (never secrets).",
        ConfigArgs,
        (Read.CONFIG_GET,),
        obj_schema("section", section="string", config="object"),
        bodies(lambda a: {"section": a.section}),
        lambda a, r, c: body_of(r),
    ),
    ToolSpec(
        "diag_run",
        "Diagnostics",
        "Run one read-only diagnostic check at the box (clock, link, meter, planner, driver). The driver check needs src, a driver's name as drivers_status lists it; without it the answer names the drivers.",
        DiagArgs,
        (Read.DIAG_RUN, Read.DRIVERS_GET),
        obj_schema("result", check="string", result="string", details="object"),
        diag_requests,
        diag,
        pick=diag_reads,
    ),
)
TOOLS += (
    ToolSpec(
        "energy_report",
        "Energy report",
        "Energy in kWh and money per day, week or month in the home's time zone, from the box's meters: import and export (counted apart), solar, self-consumption and self-sufficiency, EV, battery throughput, import cost and export value, and the change from the period before. A period still running is compared with the same stretch of the one before, and says so; incomplete meter coverage is stated, never averaged away. `summary` is one sentence to repeat.",
        ReportArgs,
        (Read.ENERGY_GET,),
        OUTPUT_SCHEMAS["energy_report"],
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
        OUTPUT_SCHEMAS["charge_options"],
        lambda a, n: [],
        lambda a, r, c: {},
        flow=run_charge,
    ),
)
TOOLS_BY_NAME: dict[str, ToolSpec] = {t.name: t for t in TOOLS}
