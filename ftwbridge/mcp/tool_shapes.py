"""The building blocks of the read tools' table (`tools.py`): the box request bodies each
tool sends, and the shapes that turn the box's answers into a tool's `structuredContent`
(PROTOCOL.md parts B, D and G), each a pure function of the arguments, the replies and the
bridge's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ftwbridge.proto.clean import to_json
from ftwbridge.proto.history import unpack_history
from ftwbridge.proto.names import Read, Resolution
from ftwbridge.proto.registry import RESOLUTIONS, limit
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from .args import (
    DAY_MS,
    HOUR_MS,
    DiagArgs,
    HistoryArgs,
    PlanArgs,
    _Args,
)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool's shape may use besides the answers: the bridge's wall clock (ms)."""

    now_ms: int


Requests = Callable[[Any, int], list[Any]]
"""(args, now in ms since the epoch) -> the request body for each of the tool's reads, in order."""


def obj_schema(*required: str, **props: str) -> dict[str, Any]:
    """A JSON Schema object of `props` (name -> JSON type), `required` naming the ones it needs."""
    return {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": list(required),
    }


def body_of(replies: list[Reply]) -> dict[str, Any]:
    """The first reply's body as JSON-safe values (a bare value under `value`)."""
    value = to_json(replies[0].body)
    return value if isinstance(value, dict) else {"value": value}


def bodies(body: Callable[[Any], Any] | None = None) -> Requests:
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


def plan_get(args: PlanArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    """`plan_get`'s result: the plan's slots of the next `hours`."""
    plan = body_of(replies)
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


def plan_explain(args: PlanArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    """`plan_explain`'s result: the next `hours`' slots, each with its reason in words."""
    plan, price = body_of(replies[:1]), body_of(replies[1:])
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


def history_requests(args: HistoryArgs, now_ms: int) -> list[Any]:
    """The `history.get` bodies of `history_query`: the range, series and resolution asked."""
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


def history(args: HistoryArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
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


def homes_list(token: TokenRecord, grant: AgentGrant | None) -> dict[str, Any]:
    """`homes_list`'s result, from the token and its grant in the newest roster (no box read)."""
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


def optional_body(args: _Args, *keys: str) -> dict[str, Any]:
    """The request body of the `keys` of `args` that are set."""
    data = args.model_dump()
    return {k: data[k] for k in keys if data.get(k) is not None}


def _diag_needs_src(args: DiagArgs) -> bool:
    """The driver check names the driver in `src` (stubbox/home.py `diag`); without it the
    bridge reads `drivers.get` instead, to name the drivers there are."""
    return args.check == "driver" and args.src is None


def diag_reads(args: DiagArgs) -> tuple[Read, ...]:
    """The read `diag_run` makes: the drivers' list when the driver check lacks `src`."""
    return (Read.DRIVERS_GET,) if _diag_needs_src(args) else (Read.DIAG_RUN,)


def diag_requests(args: DiagArgs, now_ms: int) -> list[Any]:
    """The body of `diag_run`'s one read."""
    return [None] if _diag_needs_src(args) else [optional_body(args, "check", "src")]


def diag(args: DiagArgs, replies: list[Reply], ctx: ToolContext) -> dict[str, Any]:
    """The box's `diag` answer; for the driver check without `src`, a result that says `src`
    is needed and names the home's drivers (from its `drivers` answer), with `result`
    `needs_src` so no one takes it for a check that ran."""
    body = body_of(replies)
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
