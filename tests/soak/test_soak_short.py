"""The standing soak, short: every scenario `make soak` runs, with the same code, on a small
fleet with small counts, in three runs of its own (so that xdist can hand them to different
workers, each with its own bridge and homes).

The real `ftwbridge serve` and stub homes in their own processes on 127.0.0.1: a home killed
with SIGKILL and started again, strangers at the door; a home stopped with SIGSTOP past
`door_silence_s`, an agent revoked under load, clients that hang up on a slow home; the load
alone, SIGTERM to the bridge and caps that bind. Every invariant must hold (`soak/report.py`).
Each run takes 30 to 60 s of real time on an idle machine; the bound is for a loaded one.
"""

from __future__ import annotations

import pytest
import trio

from soak import report
from soak.faults import SCENARIOS
from soak.rig import Options
from soak.run import soak

BOUND_S = 300.0
"""Bound on one short soak run (seconds); a bound, never a measurement."""
RUNS = (["kill9", "garbage"], ["stall", "revoke", "hangup"], ["steady", "sigterm", "caps"])
"""The scenarios of each run, in `make soak`'s order within it."""
AGENTS = {"caps": 3}
"""Agents per home a run needs (else 2): `caps` binds `sessions_per_home` 2 with a third."""


def test_the_runs_cover_every_scenario_once() -> None:
    assert sorted(n for run in RUNS for n in run) == sorted(sc.name for sc in SCENARIOS)


@pytest.mark.parametrize("names", RUNS, ids=["-".join(run) for run in RUNS])
async def test_every_fault_leaves_nothing_behind(names: list[str]) -> None:
    agents = max(AGENTS.get(n, 2) for n in names)
    options = Options(scale=0.3, rate_per_s=4.0, solo=2, fleet=2, agents=agents)
    with trio.fail_after(BOUND_S):
        rows = await soak(options, names)
    print(report.table(rows))
    print(report.details(rows))
    assert [r.scenario for r in rows] == names
    for r in rows:
        lost = [c for c in r.calls if c.outcome in report.LOST]
        assert r.ok, (r.scenario, r.cells, lost)
        assert any(c.outcome == "ok" for c in r.calls), r.scenario  # the load did reach homes
