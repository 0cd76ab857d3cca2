"""The stub box's answers to agent reads: argument checks, caps and limits, then the home.

`answer(box, grant, read, body, now_ms, uptime_ms)` returns [(answer type, body), ...]; a
refusal raises `problem.Problem`. Request bodies and answer shapes: PROTOCOL.md part B and
agents.yaml (`answers`, `limits`); `plan`, `price` and `hist.*` as upstream.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from ftwbridge.proto.calendar import BUCKETS, SHORTEST_MS, count_buckets
from ftwbridge.proto.envelope import dumps
from ftwbridge.proto.frame import MAX_ENVELOPE_BYTES
from ftwbridge.proto.names import Answer, Cap, Code, Read, Resolution, Role
from ftwbridge.proto.registry import LIMITS, OP_SCOPE, limit
from ftwbridge.proto.roster import AgentGrant

from .history import build_tiles
from .home import Home
from .problem import Problem
from .telemetry import MODES


class BoxView(Protocol):
    """What a read needs of the box that answers it (`box.Box` fits)."""

    @property
    def box_id(self) -> str: ...
    @property
    def clock_source(self) -> str: ...
    @property
    def home(self) -> Home: ...


DAY_MS = 86_400_000
CLOCK_SLACK_MS = 300_000
"""A window may start up to the allowed clock skew (5 min) before `history_days` back: the
bridge computes `fromMs` by its own clock. Points before the cap are still missing."""
ANSWER_ROOM_BYTES = MAX_ENVELOPE_BYTES - 64
"""Room for an answer body inside one frame, leaving space for the envelope's t and id."""
BOX_BUILD = "stubbox-0.1"
ENERGY_BUCKET_BYTES = 172
"""The most one `energy` bucket takes in CBOR (its keys and seven 5-byte numbers), bytes."""


def _problem(code: Code, **args: Any) -> Exception:
    return Problem(code, **args)


def _body(body: Any) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise _problem(Code.E_UNKNOWN_OP, arg="b")
    return body


def _int(body: dict[str, Any], key: str, default: int | None = None) -> int:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _problem(Code.E_UNKNOWN_OP, arg=key)
    return v


def _opt_text(body: dict[str, Any], key: str) -> str | None:
    v = body.get(key)
    if v is not None and not isinstance(v, str):
        raise _problem(Code.E_UNKNOWN_OP, arg=key)
    return v


def _bounded(name: str, asked: int) -> int:
    top = limit(name, "max")
    if asked < 1:
        raise _problem(Code.E_UNKNOWN_OP, arg=name)
    if asked > top:
        raise _problem(Code.E_CAP_EXCEEDED, cap=name, max=top, asked=asked)
    return asked


def hello_ok(box: BoxView, grant: AgentGrant, now_ms: int, uptime_ms: int) -> dict[str, Any]:
    """The `hello_ok` body for an agent: upstream fields plus part B's agent fields.

    Upstream `caps` already names the box's capabilities, so the grant's caps travel as
    `grantCaps` (our reading of an ambiguity in part B; docs/protocol.md). `mode` is
    upstream's (`full` or `readonly` of the web app's `BoxMode`): `full` when the grant lets
    the agent command at least one op (the op in `ops` and its scope, registry.yaml `ops`, in
    `scopes`: what part E's checks let through), else `readonly`.
    """
    commands = any(OP_SCOPE.get(op) in grant.scopes for op in grant.ops)
    caps = ["status.core", "history.5m", "history.1h", "plan.dispatch", "price.spot"]
    digest = hashlib.sha256(b"".join(c.encode() + b"\0" for c in sorted(caps))).hexdigest()
    return {
        "proto": 1,
        "mode": "full" if commands else "readonly",
        "box": {"id": box.box_id, "build": BOX_BUILD, "tz": box.home.tz},
        "clock": {
            "source": box.clock_source,
            "syncedAtMs": now_ms - 60_000,
            "uptimeMs": uptime_ms,
            "nowMs": now_ms,
        },
        "caps": caps,
        "capsHash": digest[:16],
        "modes": list(MODES),
        "role": Role.AGENT.value,
        "scopes": list(grant.scopes),
        "ops": list(grant.ops),
        "grantCaps": dict(grant.caps),
        "expiresAtMs": grant.expires_at_ms,
    }


def _fit_plan(plan: dict[str, Any]) -> dict[str, Any]:
    slots = list(plan.get("slots", []))
    while slots and len(dumps(plan | {"slots": slots})) > ANSWER_ROOM_BYTES:
        slots = slots[: max(1, len(slots) * 3 // 4)] if len(slots) > 1 else []
    return plan | {"slots": slots}


def answer(
    box: BoxView, grant: AgentGrant, read: Read, body: Any, now_ms: int, uptime_ms: int
) -> list[tuple[str, Any]]:
    """Serve one agent read; returns [(answer type, body), ...] (several for `hist.query`).

    Raises:
        problem.Problem: the read's arguments, a cap or a limit refuse it.
    """
    home = box.home
    b = _body(body)
    if read is Read.LIVE_GET:
        return [(Answer.LIVE, home.live(now_ms, uptime_ms))]
    if read is Read.LOADPOINTS_GET:
        return [(Answer.LOADPOINTS, home.loadpoints(now_ms))]
    if read is Read.CARS_GET:
        return [(Answer.CARS, home.cars(now_ms))]
    if read is Read.PLAN_GET:
        return [(Answer.PLAN, _fit_plan(home.plan(now_ms, uptime_ms)))]
    if read is Read.PRICE_GET:
        from_ms, to_ms = _int(b, "fromMs"), _int(b, "toMs")
        if to_ms <= from_ms:
            raise _problem(Code.E_UNKNOWN_OP, t=read.value)
        return [(Answer.PRICE, home.price(from_ms, to_ms))]
    if read is Read.HIST_QUERY:
        return _history(home, grant, b, now_ms)
    if read is Read.ENERGY_GET:
        return [(Answer.ENERGY, _energy(home, grant, b, now_ms))]
    if read is Read.HEALTH_GET:
        return [(Answer.HEALTH, home.health(now_ms, uptime_ms))]
    if read is Read.DRIVERS_GET:
        return [(Answer.DRIVERS, home.drivers(now_ms, uptime_ms))]
    if read is Read.EVENTS_GET:
        return [(Answer.EVENTS, _events(home, b, now_ms))]
    if read is Read.LOGS_GET:
        return [(Answer.LOGS, _logs(home, b, now_ms))]
    if read is Read.CONFIG_GET:
        section = _opt_text(b, "section") or ""
        config = home.config(section)
        if config is None:
            raise _problem(Code.E_NOT_FOUND, what="section", id=section)
        return [(Answer.CONFIG, config)]
    if read is Read.DIAG_RUN:
        check, src = _opt_text(b, "check") or "", _opt_text(b, "src")
        result = home.diag(check, src, now_ms, uptime_ms)
        if result is None:
            what, ident = ("src", src) if src is not None else ("check", check)
            raise _problem(Code.E_NOT_FOUND, what=what, id=ident)
        return [(Answer.DIAG, result)]
    raise _problem(Code.E_UNKNOWN_OP, t=read.value)


def _events(home: Any, b: dict[str, Any], now_ms: int) -> Any:
    """`events.get`'s page: `limit` events (bounded) before or after a cursor."""
    n = _bounded("events_limit", _int(b, "limit", limit("events_limit", "default")))
    before, after = _opt_text(b, "before"), _opt_text(b, "after")
    page = home.events(now_ms, limit=n, before=before, after=after, max_bytes=ANSWER_ROOM_BYTES)
    if page is None:
        raise _problem(Code.E_UNKNOWN_OP, arg="before" if before is not None else "after")
    return page


def _logs(home: Any, b: dict[str, Any], now_ms: int) -> Any:
    """`logs.get`'s page: `lines` lines (bounded) at `level` or above, before or after a
    cursor."""
    n = _bounded("logs_lines", _int(b, "lines", limit("logs_lines", "default")))
    level = _opt_text(b, "level") or "info"
    if level not in ("debug", "info", "warn", "error"):
        raise _problem(Code.E_UNKNOWN_OP, arg="level")
    before, after = _opt_text(b, "before"), _opt_text(b, "after")
    page = home.logs(
        now_ms, lines=n, level=level, before=before, after=after, max_bytes=ANSWER_ROOM_BYTES
    )
    if page is None:
        raise _problem(Code.E_UNKNOWN_OP, arg="before" if before is not None else "after")
    return page


def _history(home: Any, grant: AgentGrant, b: dict[str, Any], now_ms: int) -> list[tuple[str, Any]]:
    series = b.get("series")
    if not isinstance(series, list) or not series or not all(isinstance(s, str) for s in series):
        raise _problem(Code.E_UNKNOWN_OP, t=Read.HIST_QUERY.value, field="series")
    top = LIMITS["history_series"]["max"]
    if len(series) > top:
        raise _problem(Code.E_CAP_EXCEEDED, cap="history_series", max=top, asked=len(series))
    res = b.get("res")
    if res not in {r.value for r in Resolution}:
        raise _problem(Code.E_UNKNOWN_OP, t=Read.HIST_QUERY.value, field="res")
    from_ms, to_ms = _int(b, "fromMs"), _int(b, "toMs")
    if from_ms < 0 or to_ms <= from_ms or from_ms >= now_ms:
        raise _problem(Code.E_UNKNOWN_OP, t=Read.HIST_QUERY.value)
    days = grant.cap(Cap.HISTORY_DAYS)
    if from_ms < now_ms - days * DAY_MS - CLOCK_SLACK_MS:
        asked = -(-(now_ms - from_ms) // DAY_MS)
        raise _problem(Code.E_CAP_EXCEEDED, cap=Cap.HISTORY_DAYS.value, max=days, asked=asked)
    # Past retention the box serves what it keeps and reports the rest as an `evicted` gap, as
    # the upstream box does (it never sends E_RANGE_TOO_LARGE).
    max_points = _int(b, "maxPoints", limit("history_points", "default"))
    max_points = min(max(max_points, 1), limit("history_points", "max"))
    chunks, end = build_tiles(
        home,
        series=list(series),
        res=res,
        from_ms=from_ms,
        to_ms=min(to_ms, now_ms),
        now_ms=now_ms,
        max_points=max_points,
        history_days=days,
    )
    return [*((Answer.HIST_CHUNK, c) for c in chunks), (Answer.HIST_END, end)]


def _energy(home: Home, grant: AgentGrant, b: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """`energy.get` after part G's checks, each refused in words.

    A bucket outside agents.yaml `energy_buckets`, or an empty or future window:
    `E_UNKNOWN_OP`. A window starting before the grant's `history_days` (less the clock
    slack): `E_CAP_EXCEEDED {cap: history_days, max, asked}`. More than `energy_buckets.max`
    (400) buckets up to now after rounding out: `E_RANGE_TOO_LARGE {maxMs}`, where `maxMs` is
    a width that always fits (399 of the bucket's shortest length). An answer must also fit
    one frame (16 KiB, part A), which holds about 95 buckets: past that the same refusal
    names the width that fits (docs/protocol.md, "Energy totals").
    """
    bucket = b.get("bucket")
    if bucket not in BUCKETS:
        raise _problem(Code.E_UNKNOWN_OP, t=Read.ENERGY_GET.value, field="bucket")
    assert isinstance(bucket, str)
    from_ms, to_ms = _int(b, "fromMs"), _int(b, "toMs")
    if from_ms < 0 or to_ms <= from_ms or from_ms >= now_ms:
        raise _problem(Code.E_UNKNOWN_OP, t=Read.ENERGY_GET.value)
    days = grant.cap(Cap.HISTORY_DAYS)
    if from_ms < now_ms - days * DAY_MS - CLOCK_SLACK_MS:
        asked = -(-(now_ms - from_ms) // DAY_MS)
        raise _problem(Code.E_CAP_EXCEEDED, cap=Cap.HISTORY_DAYS.value, max=days, asked=asked)
    most = limit("energy_buckets", "max")
    if count_buckets(from_ms, min(to_ms, now_ms + 1), bucket, home.meters.zone, most) > most:
        raise _problem(Code.E_RANGE_TOO_LARGE, maxMs=(most - 1) * SHORTEST_MS[bucket])
    answer = home.energy(from_ms, to_ms, bucket, now_ms, days)
    if len(dumps(answer)) > ANSWER_ROOM_BYTES:
        fit = ANSWER_ROOM_BYTES // ENERGY_BUCKET_BYTES
        raise _problem(Code.E_RANGE_TOO_LARGE, maxMs=(fit - 1) * SHORTEST_MS[bucket])
    return answer
