"""`energy_report`'s arithmetic and words, pure: part G buckets in, periods and a sentence out.

Figures (docs/clients.md, "Energy reports"): the box's meter integrals in Wh shown in kWh (one
decimal); self-consumption is the share of solar the home used itself, (pv - export) / pv;
self-sufficiency the share of its use (load + EV) not bought, 1 - import / (load + EV), both in
percent and null without solar or use; battery throughput is energy in plus energy out; costs are
the box's, in major units of its currency. A change is (this - before) / before in percent,
given only when both stretches are covered for at least `COMPARE_COVERAGE` of their length.
A running period is compared with the same stretch of the one before (`stretch`), never with
the whole of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo

ENERGIES: Final = ("importWh", "exportWh", "pvWh", "loadWh", "evWh", "batteryInWh", "batteryOutWh")
COMPARE_COVERAGE: Final = 0.95
"""How much of each stretch the meters must cover for a change to be given (a fraction)."""
FINE: Final = {"day": "hour", "week": "day", "month": "day"}
"""The finer bucket a running period is compared in: whole hours of a day, whole days else."""


@dataclass(frozen=True, slots=True)
class Totals:
    """Energies (Wh), costs (minor units or None) and coverage (ms) of one stretch of time."""

    wh: dict[str, int]
    import_cost: int | None
    export_value: int | None
    covered_ms: int
    length_ms: int

    @classmethod
    def of(cls, buckets: list[dict[str, Any]]) -> Totals:
        """The sum of part G buckets (`{startMs, endMs, importWh, ..., coveredMs}`)."""

        def cost(key: str) -> int | None:
            values = [b.get(key) for b in buckets]
            if any(not isinstance(v, int) for v in values):
                return None
            return sum(int(v) for v in values if isinstance(v, int))

        return cls(
            wh={k: sum(int(b[k]) for b in buckets) for k in ENERGIES},
            import_cost=cost("importCostMinor"),
            export_value=cost("exportValueMinor"),
            covered_ms=sum(int(b["coveredMs"]) for b in buckets),
            length_ms=sum(int(b["endMs"]) - int(b["startMs"]) for b in buckets),
        )

    def covered(self, until_ms: int | None = None) -> float:
        """The fraction of the stretch (up to `until_ms` when running) the meters cover."""
        return self.covered_ms / self.length_ms if self.length_ms > 0 else 0.0


def _kwh(wh: int) -> float:
    return round(wh / 1000, 1)


def _percent(part: float, whole: float) -> float | None:
    return round(100 * part / whole, 1) if whole > 0 else None


def _change(now: float, before: float) -> float | None:
    return round(100 * (now - before) / before, 1) if before > 0 else None


def figures(t: Totals, currency: str | None) -> dict[str, Any]:
    """The report's figures of one stretch: kWh, percents, money in major units."""
    w = t.wh
    use = w["loadWh"] + w["evWh"]
    return {
        "importKWh": _kwh(w["importWh"]),
        "exportKWh": _kwh(w["exportWh"]),
        "pvKWh": _kwh(w["pvWh"]),
        "loadKWh": _kwh(w["loadWh"]),
        "evKWh": _kwh(w["evWh"]),
        "batteryInKWh": _kwh(w["batteryInWh"]),
        "batteryOutKWh": _kwh(w["batteryOutWh"]),
        "batteryThroughputKWh": _kwh(w["batteryInWh"] + w["batteryOutWh"]),
        "selfConsumptionPercent": _percent(max(0, w["pvWh"] - w["exportWh"]), w["pvWh"]),
        "selfSufficiencyPercent": _percent(max(0, use - w["importWh"]), use),
        "importCost": None if t.import_cost is None else t.import_cost / 100,
        "exportValue": None if t.export_value is None else t.export_value / 100,
        "currency": currency,
    }


def changes(now: Totals, before: Totals) -> dict[str, float | None] | None:
    """Percent changes from `before` to `now`, or None when either is covered too little."""
    if min(now.covered(), before.covered()) < COMPARE_COVERAGE:
        return None
    out: dict[str, float | None] = {
        f"{k[:-2]}Percent": _change(now.wh[k], before.wh[k])
        for k in ("importWh", "exportWh", "pvWh", "evWh")
    }
    ic, bc = now.import_cost, before.import_cost
    out["importCostPercent"] = None if ic is None or bc is None else _change(ic, bc)
    return out


def label(start_ms: int, period: str, tz: ZoneInfo) -> str:
    """A period's name in the box's zone: "1 December 2026", "week 49 of 2026", "December 2026"."""
    d = datetime.fromtimestamp(start_ms / 1000, UTC).astimezone(tz)
    if period == "day":
        return f"{d.day} {d:%B %Y}"
    if period == "week":
        year, week, _ = d.isocalendar()
        return f"week {week} of {year}"
    return f"{d:%B %Y}"


def _money(value: float | None, currency: str | None) -> str:
    return "" if value is None else f"; it cost {value:.0f} {currency or ''}".rstrip()


def sentence(period: str, report: dict[str, Any]) -> str:
    """One sentence a model can repeat about the last period of a report (`shape` below)."""
    last = report["periods"][-1]
    f, change = last["figures"], last["change"]
    this = {"day": "today", "week": "this week", "month": "this month"}[period]
    previous = {"day": "yesterday", "week": "last week", "month": "last month"}[period]
    if last["running"]:
        head = f"Imported {f['importKWh']:g} kWh {this} so far"
    else:
        head = f"Imported {f['importKWh']:g} kWh in {last['label']}"
    words = [head]
    basis = last.get("comparedWith")
    if change is not None and change.get("importPercent") is not None:
        pct = change["importPercent"]
        how = f"{abs(pct):g} % {'less' if pct < 0 else 'more'}" if pct else "the same"
        if last["running"] and basis is not None:
            words.append(f", {how} than over the same stretch of {previous} ({basis['words']})")
        else:
            words.append(f", {how} than {previous}")
    words.append(_money(f["importCost"], f["currency"]))
    if (change is None or change.get("importPercent") is None) and last.get("noComparison"):
        words.append(f"; no comparison: {last['noComparison']}")
    text = "".join(words)
    missing = round(last.get("missingMs", 0) / 3_600_000, 1)
    if missing > 0:
        text += f"; the meters miss {missing:g} h of it ({last['coverage'] * 100:.1f} % covered)"
    return text + "."
