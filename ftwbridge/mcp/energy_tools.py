"""The `energy_report` tool: its arguments, its one or two `energy.get` reads, and its cache.

A report reads `energy.get` once in the period's own buckets (PROTOCOL.md part G) for the
periods asked plus the one before the first, and, when the last period is still running, once
more in finer buckets (hours of a day, days of a week or month) from the start of the period
before it, to compare the same stretch of both. The arithmetic and the words are
`ftwbridge.mcp.energy`'s. `run_report(call, args, ctx)` is the whole report for any caller
(the tool, and later the `ftw://home/{home}/energy/{period}` resource).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field

from ftwbridge.proto.names import Cap, Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.session import Reply

from .args import DAY_MS, _Args
from .energy import FINE, Totals, changes, figures, label, sentence

Call = Callable[[Read, Any], Awaitable[Reply]]
"""(read, request body) -> the box's reply; raises `Refusal` as the pool does."""
LONGEST_MS: Final = {"day": 25 * 3_600_000, "week": 7 * DAY_MS + 3_600_000, "month": 32 * DAY_MS}
CUT_MARGIN_MS: Final = 60_000
"""How far inside the grant's `history_days` (beyond the allowed clock skew) a report starts,
so a box whose clock runs ahead of ours does not refuse it (ms)."""
RUNNING_TTL_MS: Final = 60_000
"""How long an answer that holds a running bucket is reused (ms); finished ones are kept."""
CACHE_PER_HOME: Final = 32


class ReportArgs(_Args):
    """`energy_report`: `count` periods of `period`, the last one holding `end` (ms)."""

    period: Literal["day", "week", "month"] = Field(
        description="day, week (ISO, from Monday) or month, in the home's own time zone"
    )
    count: int = Field(default=2, ge=1, le=12, description="How many periods, newest last")
    end: int | None = Field(
        default=None,
        ge=0,
        le=2**53 - 1,
        description="An instant in the last period, ms since the epoch (default: now)",
    )


@dataclass(frozen=True, slots=True)
class FlowContext:
    """What a tool that makes its own reads gets: our clock (ms) and the caller's grant caps."""

    now_ms: int
    history_days: int
    hold_s: int
    """The longest hold the grant lets one command set, seconds (for `ev_charge_now` advice)."""
    skew_ms: int = 300_000
    """How far the box's clock may run ahead of ours (ms): reports start that much later."""


class AnswerCache:
    """Box answers per home, reused while they cannot change (part G: a finished bucket never
    changes; one holding the running bucket is reused for `RUNNING_TTL_MS`)."""

    def __init__(self) -> None:
        self._homes: dict[str, OrderedDict[Any, tuple[int | None, Reply]]] = {}

    def get(self, home: str, key: Any, now_ms: int) -> Reply | None:
        """The kept reply for `key` at `home`, if still good at `now_ms`."""
        entry = self._homes.get(home, OrderedDict()).get(key)
        if entry is None or (entry[0] is not None and entry[0] <= now_ms):
            return None
        return entry[1]

    def put(self, home: str, key: Any, reply: Reply, now_ms: int) -> None:
        """Keep `reply`: for good when every bucket ended and the box measured it, else a minute."""
        body = reply.body if isinstance(reply.body, dict) else {}
        buckets = body.get("buckets") or []
        done = bool(buckets) and all(
            isinstance(b, dict)
            and isinstance(b.get("endMs"), int)
            and b["endMs"] <= now_ms - 600_000
            for b in buckets
        )
        kept = self._homes.setdefault(home, OrderedDict())
        kept[key] = (None if done else now_ms + RUNNING_TTL_MS, reply)
        kept.move_to_end(key)
        while len(kept) > CACHE_PER_HOME:
            kept.popitem(last=False)


def cached(cache: AnswerCache, home: str, agent: bytes, call: Call, now_ms: int) -> Call:
    """`call` through `cache`, keyed by the agent (grants differ), read and body."""

    async def through(read: Read, body: Any) -> Reply:
        key = (agent, read.value, tuple(sorted(body.items())) if isinstance(body, dict) else body)
        hit = cache.get(home, key, now_ms)
        if hit is not None:
            return hit
        reply = await call(read, body)
        if read is Read.ENERGY_GET:
            cache.put(home, key, reply, now_ms)
        return reply

    return through


def _energy(reply: Reply) -> tuple[ZoneInfo, str | None, list[dict[str, Any]]]:
    body = reply.body
    if not isinstance(body, dict) or not isinstance(body.get("buckets"), list):
        raise ValueError("not an energy answer")
    try:
        tz = ZoneInfo(str(body.get("tz")))
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
    currency = body.get("currency")
    code = currency if isinstance(currency, str) and re.fullmatch("[A-Z]{3}", currency) else None
    return tz, code, list(body["buckets"])


def _minute(ms: int) -> int:
    return ms - ms % 60_000


async def run_report(call: Call, args: ReportArgs, ctx: FlowContext) -> dict[str, Any]:
    """The `energy_report` result (one or two `energy.get` reads).

    Raises:
        Refusal: `E_CAP_EXCEEDED {cap: history_days}` when the last period ends before the
            grant lets the assistant see; the box's own refusals as they come.
        ValueError: an answer that is not part G's shape (the caller turns it into
            `E_BAD_BODY`).
    """
    made = 0

    async def counted(read: Read, body: Any) -> Reply:
        nonlocal made
        made += 1
        return await call(read, body)

    now = _minute(ctx.now_ms)
    anchor = min(now, args.end if args.end is not None else now)
    cutoff = now - ctx.history_days * DAY_MS + ctx.skew_ms + CUT_MARGIN_MS
    if anchor <= cutoff:
        asked = -(-(ctx.now_ms - anchor) // DAY_MS)
        raise Refusal(
            Code.E_CAP_EXCEEDED,
            {"cap": Cap.HISTORY_DAYS.value, "max": ctx.history_days, "asked": asked},
        )
    span = (args.count + 1) * LONGEST_MS[args.period]
    body = {"fromMs": max(anchor - span, cutoff), "toMs": anchor + 1, "bucket": args.period}
    tz, currency, buckets = _energy(await counted(Read.ENERGY_GET, body))
    buckets = [b for b in buckets if b["startMs"] <= anchor][-(args.count + 1) :]
    periods = []
    for i, b in enumerate(buckets):
        if i == 0 and len(buckets) > args.count:
            continue
        before = buckets[i - 1] if i > 0 else None
        periods.append(_period(args.period, b, before, tz, currency, ctx.now_ms))
    if periods and periods[-1]["running"] and len(buckets) >= 2:
        await _stretch(counted, args.period, periods[-1], buckets[-2], buckets[-1], now, cutoff)
    report: dict[str, Any] = {
        "period": args.period,
        "tz": str(tz),
        "currency": currency,
        "periods": periods,
        "reads": made,
    }
    report["summary"] = sentence(args.period, report) if periods else "The box sent no periods."
    return report


def _period(
    period: str,
    b: dict[str, Any],
    before: dict[str, Any] | None,
    tz: ZoneInfo,
    currency: str | None,
    now_ms: int,
) -> dict[str, Any]:
    running = b["endMs"] > now_ms
    totals = Totals.of([b])
    measured = now_ms - now_ms % 300_000  # the box meters whole 5-minute slots
    elapsed = max(0, min(measured, b["endMs"]) - b["startMs"]) if running else totals.length_ms
    out: dict[str, Any] = {
        "label": label(b["startMs"], period, tz),
        "startMs": b["startMs"],
        "endMs": b["endMs"],
        "running": running,
        "coveredMs": b["coveredMs"],
        "missingMs": max(0, elapsed - b["coveredMs"]),
        "coverage": round(min(1.0, b["coveredMs"] / elapsed), 4) if elapsed > 0 else 0.0,
        "figures": figures(totals, currency),
        "change": None,
    }
    if before is None:
        out["noComparison"] = "the period before is outside the report"
    elif running:
        out["noComparison"] = "too early to compare with the same stretch before"
    else:
        out["change"] = changes(totals, Totals.of([before]))
        if out["change"] is None:
            out["noComparison"] = "the meters cover too little of one of the two periods"
    return out


async def _stretch(
    call: Call,
    period: str,
    out: dict[str, Any],
    prev: dict[str, Any],
    cur: dict[str, Any],
    now: int,
    cutoff: int,
) -> None:
    """Compare the running period with the same stretch of the one before (a second read)."""
    if prev["startMs"] < cutoff:
        out["noComparison"] = (
            "the period before begins earlier than this assistant's grant lets it read"
            " (history_days)"
        )
        return
    fine = FINE[period]
    body = {"fromMs": prev["startMs"], "toMs": now, "bucket": fine}
    _tz, _cur, rows = _energy(await call(Read.ENERGY_GET, body))
    mine = [r for r in rows if r["startMs"] >= cur["startMs"] and r["endMs"] <= now]
    theirs = [r for r in rows if prev["startMs"] <= r["startMs"] < prev["endMs"]][: len(mine)]
    if not mine or not theirs:
        return
    unit = "hours" if fine == "hour" else "days"
    n = len(theirs)
    now_t, then_t = Totals.of(mine[:n]), Totals.of(theirs)
    out["comparedWith"] = {
        "fromMs": theirs[0]["startMs"],
        "toMs": theirs[-1]["endMs"],
        "thisFromMs": mine[0]["startMs"],
        "thisToMs": mine[n - 1]["endMs"],
        "words": f"the first {n} whole {unit} of each",
    }
    out["change"] = changes(now_t, then_t)
    out["stretchFigures"] = {"this": figures(now_t, None), "before": figures(then_t, None)}
    if out["change"] is None:
        out["noComparison"] = "the meters cover too little of one of the two stretches"
    else:
        out.pop("noComparison", None)
