"""The admin listener's status page (`GET /` there): a read-only picture of the last hour.

It shows whether the bridge is ready (and why not), its version, and four small charts of the
last hour, one point a minute: homes online (`ftwbridge_uplinks`), agent sessions
(`ftwbridge_sessions`), tool calls a minute and refusals a minute (`ftwbridge_tool_calls_total`
whose outcome is not `ok`), with the hour's refusals by code under them. The points are taken
from the bridge's own metrics registry, so the page says what `/metrics` says; nothing is kept
beyond the hour, and the page loads nothing from elsewhere (no script, no font, no image).
"""

from __future__ import annotations

import html
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from prometheus_client import CollectorRegistry

from ftwbridge import __version__

SAMPLE_S = 60.0
"""Seconds between two points of the charts."""
POINTS = 61
"""Points kept: an hour of minutes and the one it starts from."""


@dataclass(frozen=True)
class Sample:
    """The figures at one time: `at_s` (wall clock, s since the epoch), homes online,
    sessions open, tool calls so far and refusals so far by code (counters since start)."""

    at_s: float
    homes: float
    sessions: float
    calls: float
    refusals: dict[str, float] = field(default_factory=dict)


def take_sample(registry: CollectorRegistry, at_s: float) -> Sample:
    """One `Sample` read from `registry` (one pass over its collectors)."""
    homes = sessions = calls = 0.0
    refusals: dict[str, float] = {}
    for family in registry.collect():
        if family.name == "ftwbridge_uplinks":
            homes = sum(s.value for s in family.samples)
        elif family.name == "ftwbridge_sessions":
            sessions = sum(s.value for s in family.samples)
        elif family.name == "ftwbridge_tool_calls":
            for s in family.samples:
                if not s.name.endswith("_total"):
                    continue
                calls += s.value
                outcome = s.labels.get("outcome", "ok")
                if outcome != "ok":
                    refusals[outcome] = refusals.get(outcome, 0.0) + s.value
    return Sample(at_s, homes, sessions, calls, refusals)


class Status:
    """The last hour of `Sample`s of one bridge's registry and the page that shows them."""

    def __init__(
        self, registry: CollectorRegistry, *, wall_s: Callable[[], float] = time.time
    ) -> None:
        self._registry = registry
        self._wall_s = wall_s
        self.samples: deque[Sample] = deque(maxlen=POINTS)

    def take(self) -> Sample:
        """Add a point now; returns it."""
        sample = take_sample(self._registry, self._wall_s())
        self.samples.append(sample)
        return sample

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Take a point every `SAMPLE_S` seconds until cancelled (the bridge's nursery)."""
        self.take()
        task_status.started()
        while True:
            await trio.sleep(SAMPLE_S)
            self.take()

    def page(self, not_ready: str | None, degraded: str | None = None) -> str:
        """The page as HTML: readiness (`not_ready` is None when ready, else why not;
        `degraded`, why a ready bridge serves less, such as a full disk), then the charts of
        the points kept and a point taken now."""
        points = [*self.samples, take_sample(self._registry, self._wall_s())]
        now = points[-1]
        first = points[0]
        per_min = [
            (b.at_s, max(b.calls - a.calls, 0.0) * 60 / max(b.at_s - a.at_s, 1.0))
            for a, b in itertools.pairwise(points)
        ]
        refused = [
            (
                b.at_s,
                max(sum(b.refusals.values()) - sum(a.refusals.values()), 0.0)
                * 60
                / max(b.at_s - a.at_s, 1.0),
            )
            for a, b in itertools.pairwise(points)
        ]
        by_code = sorted(
            ((code, n - first.refusals.get(code, 0.0)) for code, n in now.refusals.items()),
            key=lambda kv: -kv[1],
        )
        state = "ready" if not_ready is None else f"not ready: {not_ready}"
        if not_ready is None and degraded is not None:
            state = f"ready, degraded: {degraded}"
        rows = "".join(
            f"<tr><td>{html.escape(code)}</td><td>{n:.0f}</td></tr>" for code, n in by_code if n
        )
        charts = "".join(
            (
                chart("Homes online", [(p.at_s, p.homes) for p in points]),
                chart("Agent sessions", [(p.at_s, p.sessions) for p in points]),
                chart("Tool calls a minute", per_min),
                chart("Refusals a minute", refused),
            )
        )
        minutes = (now.at_s - first.at_s) / 60
        return PAGE.format(
            version=html.escape(__version__),
            state_class="bad" if not_ready else "warn" if degraded else "ok",
            state=html.escape(state),
            minutes=f"{minutes:.0f}",
            charts=charts,
            codes=rows or '<tr><td colspan="2">none</td></tr>',
        )


def chart(title: str, points: list[tuple[float, float]]) -> str:
    """A small SVG line of `points` (time s, value) with its title and latest value."""
    latest = points[-1][1] if points else 0.0
    width, height = 300, 60
    line = ""
    if len(points) >= 2:
        t0, t1 = points[0][0], points[-1][0]
        top = max(max(v for _, v in points), 1.0)
        span = max(t1 - t0, 1.0)
        line = " ".join(
            f"{(t - t0) / span * width:.1f},{height - 2 - v / top * (height - 4):.1f}"
            for t, v in points
        )
    return (
        f"<figure><figcaption>{html.escape(title)}: <b>{latest:.0f}</b></figcaption>"
        f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">'
        f'<polyline fill="none" stroke="currentColor" stroke-width="2" points="{line}"/>'
        "</svg></figure>"
    )


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="60">
<title>ftwbridge status</title>
<style>
:root {{ color-scheme: light dark; font-family: system-ui, sans-serif; }}
body {{ margin: 1rem auto; max-width: 40rem; padding: 0 1rem; line-height: 1.4; }}
.ok {{ color: #1a7f37; }} .warn {{ color: #9a6700; }} .bad {{ color: #cf222e; }}
figure {{ margin: 1rem 0; }} svg {{ width: 100%; height: 60px; color: #0969da; }}
table {{ border-collapse: collapse; }} td {{ padding: 0.2rem 1rem 0.2rem 0; }}
</style></head><body>
<h1>ftwbridge {version}</h1>
<p class="{state_class}">{state}</p>
<p>The last {minutes} minutes, a point a minute (read only; <a href="/metrics">/metrics</a>).</p>
{charts}
<h2>Refusals by code, this hour</h2>
<table>{codes}</table>
</body></html>
"""
