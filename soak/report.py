"""The invariants after each scenario, and the one table that shows them.

Each cell is `ok` or the value that failed. Invariants:

- deadline: every call ended in a result or a refusal within `call_deadline_s` plus
  `DEADLINE_SLACK_S` (calls the soak hung up on purpose, and calls that could not get in while
  it had stopped the bridge on purpose, aside);
- in flight, queued, opening, handshakes: the gauges back to zero;
- tunnels: no door tunnel without a session (`ftwbridge_door_tunnels` equals the sessions);
- uplinks: every home connected again;
- fds: the bridge's open descriptors back at the baseline (`FD_SLACK` more at most);
- rss: its resident memory within `RSS_SLACK_BYTES` of the baseline;
- effect: the fault did what it should (the scenario's own check).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

from .load import DEADLINE_SLACK_S, Call
from .procs import Sample
from .rig import FD_SLACK, RSS_SLACK_BYTES, Settled, Soak

INVARIANTS = (
    "deadline",
    "in flight",
    "queued",
    "opening",
    "tunnels",
    "handshakes",
    "uplinks",
    "fds",
    "rss",
    "effect",
)
MIB = 1024 * 1024
LOST = ("broken", "unsent", "late")
"""Outcomes that fail the deadline cell however fast they came: no answer reached the client."""
COUNTERS = (
    "ftwbridge_tool_calls_total",
    "ftwbridge_sessions_ended_total",
    "ftwbridge_handshakes_total",
    "ftwbridge_connection_faults_total",
    "ftwbridge_door_dropped_tun_total",
    "ftwbridge_pacing_refusals_total",
    "ftwbridge_mcp_requests_total",
    "ftwbridge_door_uplinks_refused_total",
    "ftwbridge_door_rosters_refused_total",
)
"""The counters a scenario's figures show the change of."""


def minus(after: Sample, before: Sample) -> Sample:
    """What each value of `after` grew by since `before`."""
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def counted(sample: Sample) -> dict[str, float]:
    """The non-zero values of `COUNTERS` in `sample`."""
    return {k: v for k, v in sample.items() if v and k.split("{")[0] in COUNTERS}


@dataclass
class Row:
    """One scenario's line: its invariants' cells and its figures."""

    scenario: str
    cells: dict[str, str]
    calls: list[Call]
    settled: Settled
    heard: dict[str, str]
    """What the assistant read, one example per outcome."""
    saw: Counter[str]
    """What the operator saw: the bridge's log lines, made general, counted."""
    counters: dict[str, float]
    """How the bridge's counters moved (since its start, if it restarted)."""

    @property
    def ok(self) -> bool:
        return all(v == "ok" for v in self.cells.values())


def _deadline(calls: list[Call], deadline_s: float) -> str:
    bound = deadline_s + DEADLINE_SLACK_S
    late = [c for c in calls if c.answered and c.took_s > bound]
    lost = Counter(c.outcome for c in calls if c.outcome in LOST)
    if not late and not lost:
        return "ok"
    parts = [f"{n} {what}" for what, n in sorted(lost.items())]
    if late:
        parts.append(f"{len(late)} past {bound:.0f} s (max {max(c.took_s for c in late):.1f})")
    return ", ".join(parts)


_GENERAL = [
    (re.compile(r"^\S+ \S+ "), ""),  # the timestamp
    (re.compile(r"\('127\.0\.0\.1', \d+\)"), "PEER"),
    (re.compile(r"(home|agent|client|sid)=\S+"), r"\1=X"),
    (re.compile(r"duration_ms=\d+"), "duration_ms=N"),
    (re.compile(r"\b\d+(\.\d+)?\b"), "N"),
]


def general(line: str) -> str:
    """A log line with its particulars (time, peer, home, agent, numbers) taken out."""
    for pattern, repl in _GENERAL:
        line = pattern.sub(repl, line)
    return line[:140]


def row(
    soak: Soak, calls: list[Call], settled: Settled, effect: str, counters: dict[str, float]
) -> Row:
    """Check the invariants of one scenario."""
    g = settled.gauges
    cells = {"deadline": _deadline(calls, soak.deadline_s)}
    if settled.down:
        cells |= {name: f"bridge: {settled.down}" for name in INVARIANTS[1:-1]}
        cells["effect"] = effect
        return Row(soak.scenario, cells, calls, settled, {}, Counter(), {})
    for name in ("in flight", "queued", "opening", "handshakes"):
        cells[name] = "ok" if g[name] == 0 else f"{g[name]:g}"
    cells["tunnels"] = (
        "ok" if g["tunnels"] == g["sessions"] else f"{g['tunnels']:g} for {g['sessions']:g}"
    )
    homes = len(soak.fleet.homes)
    cells["uplinks"] = "ok" if g["uplinks"] == homes else f"{g['uplinks']:g}/{homes}"
    fds = settled.fds - soak.baseline_fds
    cells["fds"] = "ok" if fds <= FD_SLACK else f"+{fds}"
    rss = settled.rss_bytes - soak.baseline_rss
    cells["rss"] = "ok" if rss <= RSS_SLACK_BYTES else f"+{rss / MIB:.0f} MiB"
    cells["effect"] = effect
    heard: dict[str, str] = {}
    for c in calls:
        if c.outcome != "ok" and c.words:
            heard.setdefault(c.outcome, c.words)
    saw = Counter(general(line) for line in soak.log())
    return Row(soak.scenario, cells, calls, settled, heard, saw, counters)


def _ms(values: list[float], q: int) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0] * 1000:.0f}"
    return f"{statistics.quantiles(values, n=100, method='inclusive')[q - 1] * 1000:.0f}"


def table(rows: list[Row]) -> str:
    """The invariants of every scenario, then its figures, as one text table."""
    heads = ["scenario", *INVARIANTS, "calls", "results", "refused", "p50 ms", "p99 ms"]
    lines = []
    for r in rows:
        answered = [c for c in r.calls if c.answered]
        times = sorted(c.took_s for c in answered)
        results = sum(1 for c in answered if c.outcome == "ok")
        lines.append(
            [
                r.scenario,
                *(r.cells[i] for i in INVARIANTS),
                str(len(r.calls)),
                str(results),
                str(len(answered) - results),
                _ms(times, 50),
                _ms(times, 99),
            ]
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(heads)]
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    out.append("")
    out.append("refusals by code, and calls that did not end in an answer:")
    for r in rows:
        codes = Counter(c.outcome for c in r.calls if c.outcome != "ok")
        text = ", ".join(f"{code} {n}" for code, n in codes.most_common()) or "none"
        out.append(f"  {r.scenario:10} {text}")
    return "\n".join(out)


def details(rows: list[Row]) -> str:
    """What the assistant heard and what the operator saw, scenario by scenario."""
    out = []
    for r in rows:
        s = r.settled
        out.append(
            f"== {r.scenario}: settled in {s.waited_s:.1f} s, fds {s.fds},"
            f" rss {s.rss_bytes / MIB:.0f} MiB"
        )
        for outcome, words in sorted(r.heard.items()):
            out.append(f"  assistant, {outcome}: {words}")
        lines = Counter({k: n for k, n in r.saw.items() if "status=ok" not in k})
        for line, n in lines.most_common(12):
            out.append(f"  log x{n}: {line}")
        for name, value in sorted(r.counters.items()):
            if not name.startswith("ftwbridge_tool_calls_total"):
                out.append(f"  metric +{value:g}: {name}")
    return "\n".join(out)
