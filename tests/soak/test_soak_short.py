"""The standing soak, short (issue 11): two of its scenarios with the same code `make soak`
runs, on a small fleet with small counts.

The real `ftwbridge serve` and stub homes in their own processes on 127.0.0.1; a home killed
with SIGKILL and started again on its state folder, then strangers at the door (garbage, 1 MiB
messages, silence, connect-and-close). Every invariant must hold. About 30 s of real time on
an idle machine; the bound below is for a loaded 2-core one.
"""

from __future__ import annotations

import trio

from soak import report
from soak.rig import Options
from soak.run import soak

BOUND_S = 180.0
"""Bound on the whole short soak (seconds); a bound, never a measurement."""


async def test_kill9_and_garbage_leave_nothing_behind() -> None:
    options = Options(scale=0.3, rate_per_s=4.0, solo=2, fleet=2, agents=2)
    with trio.fail_after(BOUND_S):
        rows = await soak(options, ["kill9", "garbage"])
    print(report.table(rows))
    assert [r.scenario for r in rows] == ["kill9", "garbage"]
    for r in rows:
        assert r.ok, (r.scenario, r.cells)
        assert any(c.outcome == "ok" for c in r.calls), r.scenario  # the load did reach homes
