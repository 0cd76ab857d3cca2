"""The speed goals of docs/performance.md ("Goals"), judged from one `make bench` result.

    python bench/goals.py [RESULT.json]   # the goals table of a saved run (default: today's)

`bench/run.py` calls `goals` and `table` at the end of a run, prints the table and writes it into
docs/performance.md. Each goal is a ratio measured side by side in the run: a rate or CPU ratio
is the median of the per-round ratios (same round, same connections, as `vs sdk-trio`), an
absolute bound is the figure over the bound. A goal whose figure the run did not measure says
"not measured", never a guess. Where each figure comes from (the result's keys):

- `samples`: every round's wrk figures per case (`bench/run.py`), for the rate and CPU ratios;
- `instructions`: `bench/instructions.py --json` (callgrind, each server's instructions per
  warm call over one keep-alive connection);
- `sessions`: `bench/sessions.py` (opens per second and the bridge's CPU ms per open);
  `opens`: `bench/opens.py --instructions` (the bridge's instructions per first open);
- `cluster`: `bench/cluster_hop.py`; its `hop` row at 1 connection gives `added_p50_ms`, and,
  once that bench measures them, `added_minstr_per_call` (the hop's instructions, entry and
  holder together) and `db_queries_per_call` (database queries a forwarded call runs); its
  `balancer` entry, once measured, gives `hop_share` (the fraction of calls, 0 to 1, that took
  a hop under `make cluster`'s balancer in steady state).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent

NOT_MEASURED = "not measured"


def paired(result: dict[str, Any], case: str, base: str, conns: int, key: str) -> float | None:
    """The median over rounds of `case`'s `key` over `base`'s (same round, same connections)."""
    samples = result.get("samples")
    if samples is None:  # a run saved before the rounds were kept: the ratio of the medians
        rows = {(r["case"], r["connections"]): r for r in result.get("cases", [])}
        samples = {f"{c}@{n}": [r] for (c, n), r in rows.items()}
    got = samples.get(f"{case}@{conns}", [])
    ref = samples.get(f"{base}@{conns}", [])
    ratios = [g[key] / b[key] for g, b in zip(got, ref, strict=False) if b[key]]
    return statistics.median(ratios) if ratios else None


def _goal(name: str, figure: str, ratio: float | None, met: bool | None) -> dict[str, Any]:
    return {
        "goal": name,
        "figure": figure if ratio is not None or met is not None else NOT_MEASURED,
        "ratio": None if ratio is None else round(ratio, 2),
        "met": met,
    }


def _at_least(name: str, ratio: float | None, what: str) -> dict[str, Any]:
    figure = "" if ratio is None else f"{ratio:.2f}x {what}"
    return _goal(name, figure, ratio, None if ratio is None else ratio >= 1)


def _at_most(name: str, ratio: float | None, what: str) -> dict[str, Any]:
    figure = "" if ratio is None else f"{ratio:.2f}x {what}"
    return _goal(name, figure, ratio, None if ratio is None else ratio <= 1)


def _bound(name: str, value: float | None, bound: float, unit: str) -> dict[str, Any]:
    """An absolute upper bound: the ratio is value / bound."""
    if value is None:
        return _goal(name, "", None, None)
    return _goal(name, f"{value:.2f} {unit} (bound {bound:g})", value / bound, value <= bound)


def _hop_row(result: dict[str, Any]) -> dict[str, Any]:
    rows = (result.get("cluster") or {}).get("hop") or []
    return next((r for r in rows if r.get("connections") == 1), {})


def _http_goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for conns in (16, 64):
        rate = paired(result, "bridge", "sdk-uvicorn", conns, "rps")
        cpu = paired(result, "bridge", "sdk-uvicorn", conns, "cpu_ms_per_call")
        out.append(_at_least(f"bridged status at {conns}: rate >= sdk-uvicorn", rate, "its rate"))
        out.append(_at_most(f"bridged status at {conns}: CPU/call <= sdk-uvicorn", cpu, "its CPU"))
    rate = paired(result, "bridge", "sdk-trio", 1, "rps")
    out.append(_at_least("bridged status at 1: rate >= sdk-trio", rate, "its rate"))
    return out


def _ts_goal(result: dict[str, Any]) -> dict[str, Any]:
    """The TypeScript server is reported: the bridge's rate and CPU against it at each count,
    and instructions per call; met when the case ran with every response good."""
    parts = []
    for conns in (1, 16, 64):
        rate = paired(result, "bridge", "sdk-ts", conns, "rps")
        cpu = paired(result, "bridge", "sdk-ts", conns, "cpu_ms_per_call")
        if rate is not None and cpu is not None:
            parts.append(f"at {conns}: rate {rate:.2f}x, CPU {cpu:.2f}x")
    instr = (result.get("instructions") or {}).get("mega_instructions_per_call") or {}
    ratio = None
    if "bridge" in instr and "sdk-ts" in instr:
        ratio = instr["bridge"] / instr["sdk-ts"]
        parts.append(f"instructions {ratio:.2f}x")
    if not parts:
        return _goal("TS SDK server reported (bridge against it)", "", None, None)
    bad = sum(r["bad"] for r in result.get("cases", []) if r["case"] == "sdk-ts")
    ran = any(r["case"] == "sdk-ts" for r in result.get("cases", []))
    rate16 = paired(result, "bridge", "sdk-ts", 16, "rps")
    figure = "bridge vs sdk-ts " + "; ".join(parts) + ("" if not bad else f"; {bad} bad")
    return _goal("TS SDK server reported (bridge against it)", figure, rate16, ran and not bad)


def goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal of docs/performance.md ("Goals") with its figure, ratio and verdict (`met`:
    True, False, or None when not measured), in the order the page lists them."""
    out = _http_goals(result)
    instr = (result.get("instructions") or {}).get("mega_instructions_per_call") or {}
    out.append(_bound("instructions per warm call <= 3.0 M", instr.get("bridge"), 3.0, "M"))
    out.append(_ts_goal(result))
    sessions = result.get("sessions") or {}
    cpu_ms = sessions.get("bridge_cpu_ms_per_open")
    name = "opens >= 1,000/s per bridge core"
    if cpu_ms:
        per_core = 1000 / cpu_ms
        figure = f"{per_core:.0f}/s per core ({cpu_ms:.2f} ms CPU per open)"
        out.append(_goal(name, figure, per_core / 1000, per_core >= 1000))
    else:
        out.append(_goal(name, "", None, None))
    first_open = (result.get("opens") or {}).get("bridge_minstr_per_open")
    out.append(_bound("instructions per first open <= 4.5 M", first_open, 4.5, "M"))
    hop = _hop_row(result)
    out.append(_bound("hop adds <= 1 ms p50 at 1", hop.get("added_p50_ms"), 1.0, "ms"))
    out.append(_bound("hop adds <= 1.5 M at 1", hop.get("added_minstr_per_call"), 1.5, "M"))
    queries = hop.get("db_queries_per_call")
    out.append(
        _goal(
            "no database query per forwarded call",
            "" if queries is None else f"{queries:g} per call",
            None,
            None if queries is None else queries == 0,
        )
    )
    share = ((result.get("cluster") or {}).get("balancer") or {}).get("hop_share")
    percent = None if share is None else 100 * share
    out.append(_bound("<= 5 % of calls hop under the balancer", percent, 5.0, "% of calls"))
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The goals as Markdown: goal, figure, ratio (for a bound: figure over bound), verdict."""
    out = ["| goal | measured | ratio | verdict |", "|---|---|---|---|"]
    for g in rows:
        verdict = {True: "met", False: "not met", None: NOT_MEASURED}[g["met"]]
        ratio = "" if g["ratio"] is None else f"{g['ratio']:.2f}"
        out.append(f"| {g['goal']} | {g['figure']} | {ratio} | {verdict} |")
    return "\n".join(out)


if __name__ == "__main__":
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default = BENCH / "results" / f"{dt.date.today().isoformat()}.json"
    p.add_argument("result", nargs="?", default=str(default), help="a make bench result")
    args = p.parse_args()
    print(table(goals(json.loads(Path(args.result).read_text()))))
    sys.exit(0)
