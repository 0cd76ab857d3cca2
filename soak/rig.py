"""The soak's rig: the bridge, the fleet and the load together, and the checks after a fault.

`open_rig` sets everything up in a fresh folder (the bridge's state and every log) and tears it
down whatever happens. `Soak.settle` waits, within `SETTLE_S`, for the bridge to be back at
rest and reads what it left: the gauges, its open descriptors and its resident memory.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .fleet import Agent, Fleet
from .load import Call, Load
from .procs import WAIT_S, BridgeProc, Children, Sample, by_label, metric

SETTINGS: dict[str, Any] = {
    "call_deadline_s": 8.0,
    "drain_s": 5.0,
    "idle_close_s": 12.0,
    "door_hello_s": 4.0,
    "door_ping_s": 3.0,
    "door_silence_s": 10.0,
}
"""The bridge's settings for the soak: shorter deadlines than production so that faults show
within seconds. `door_silence_s` stays above `call_deadline_s`: it also bounds how long an
HTTP connection may send nothing, which a call waiting for its box does."""
SETTLE_S = 20.0
"""How long the bridge has to come back to rest after a scenario's last call (seconds): the
slowest cleanup is a slow box working off reads whose callers hung up."""
FD_SLACK = 2
"""Descriptors above the baseline still called flat (a connection of the soak's own closing)."""
RSS_SLACK_BYTES = 24 * 1024 * 1024
"""Resident memory above the baseline still called back (bytes; 24 MiB)."""


@dataclass
class Options:
    """What one soak runs. Durations in the scenarios are multiplied by `scale`, and so are
    the counts of strangers and hang-ups (at least one of each)."""

    scale: float = 1.0
    rate_per_s: float = 6.0
    solo: int = 4
    fleet: int = 8
    agents: int = 3
    seed: int = 11
    slow_ms: int | None = 1000
    """Per-read time of the slow home the hang-up scenario uses (None: no slow home)."""
    keep: bool = False
    """Keep the folder with the state and logs (printed at the end)."""


@dataclass
class Settled:
    """What the bridge showed at rest after a scenario."""

    gauges: dict[str, float]
    fds: int
    rss_bytes: int
    waited_s: float
    down: str = ""
    """Why the bridge could not be read (it had exited, its admin listener did not answer)."""


@dataclass
class Soak:
    """Everything a scenario works with."""

    options: Options
    root: Path
    children: Children
    bridge: BridgeProc
    fleet: Fleet
    load: Load
    baseline_fds: int = 0
    baseline_rss: int = 0
    marks: dict[Path, int] = field(default_factory=dict)
    """Where the bridge's logs stood when the scenario began."""
    scenario: str = ""

    def t(self, seconds: float) -> float:
        """A scenario's duration, scaled (seconds)."""
        return seconds * self.options.scale

    def n(self, count: int) -> int:
        """A scenario's count, scaled (at least 1)."""
        return max(1, round(count * self.options.scale))

    @property
    def deadline_s(self) -> float:
        return float(self.bridge.running.get("call_deadline_s", 25.0))

    def calls(self) -> list[Call]:
        """The calls of the scenario running now."""
        return [c for c in self.load.calls if c.scenario == self.scenario]

    def log(self) -> list[str]:
        """The bridge's log lines since the scenario began."""
        return self.bridge.log_lines(self.marks)

    async def probe(
        self, home: str, agent: Agent | None = None, *, until_ok_s: float = 0.0
    ) -> Call:
        """One `status` call to `home` (by `agent`, else the home's next); with `until_ok_s`,
        again every 0.5 s until one is `ok` or that many seconds have passed."""
        deadline = trio.current_time() + until_ok_s
        async with self.load.client() as http:
            while True:
                who = agent or self.fleet.next_agent(home)
                call = await self.load.call(http, self.scenario, who, "status", {})
                if call.outcome == "ok" or trio.current_time() >= deadline:
                    return call
                await trio.sleep(0.5)  # the home is coming back: ask again shortly

    async def gauges(self) -> dict[str, float]:
        """The gauges the invariants read, from `/metrics` (`sessions`: every session that has
        opened and not ended, whatever the states `ftwbridge_sessions` names)."""
        m: Sample = await self.bridge.metrics()
        opening = metric(m, "ftwbridge_sessions", state="opening")
        return {
            "in flight": metric(m, "ftwbridge_calls_in_flight"),
            "queued": metric(m, "ftwbridge_calls_queued"),
            "opening": opening,
            "sessions": sum(by_label(m, "ftwbridge_sessions").values()) - opening,
            "tunnels": metric(m, "ftwbridge_door_tunnels"),
            "handshakes": metric(m, "ftwbridge_keys_handshakes_pending"),
            "uplinks": metric(m, "ftwbridge_uplinks"),
        }

    def at_rest(self, g: dict[str, float], fds: int) -> bool:
        """Whether the gauges and descriptors show the bridge at rest with every home up."""
        return (
            g["in flight"] == g["queued"] == g["opening"] == g["handshakes"] == 0
            and g["tunnels"] == g["sessions"]
            and g["uplinks"] == len(self.fleet.homes)
            and fds <= self.baseline_fds + FD_SLACK
        )

    async def settle(self) -> Settled:
        """Wait up to `SETTLE_S` for the bridge to be at rest; returns what it shows then."""
        began = trio.current_time()
        while True:
            try:
                fds = self.bridge.fds()
                g = await self.gauges()
                rss = self.bridge.rss_bytes()
            except (OSError, RuntimeError, trio.TooSlowError) as exc:
                return Settled({}, 0, 0, trio.current_time() - began, down=type(exc).__name__)
            if self.at_rest(g, fds) or trio.current_time() - began >= SETTLE_S:
                return Settled(g, fds, rss, trio.current_time() - began)
            await trio.sleep(0.25)  # another process's state: no event reaches us

    async def wait_uplinks(self) -> None:
        """Wait until every home has its uplink at the bridge.

        Raises:
            trio.TooSlowError: not within `WAIT_S`.
        """
        with trio.fail_after(WAIT_S):
            while True:
                if (await self.gauges())["uplinks"] == len(self.fleet.homes):
                    return
                await trio.sleep(0.2)  # boxes redial with backoff, in their own processes

    async def restart_bridge(self, **overrides: Any) -> tuple[int | None, float]:
        """SIGTERM the bridge, start it again on the same state with `overrides`, and wait
        for every home to be back; returns (exit status, seconds the stop took)."""
        self.load.bridge_away = True
        try:
            status, took = await self.bridge.stop(signal.SIGTERM)
            await self.bridge.start(**overrides)
        finally:
            self.load.bridge_away = False
        await self.wait_uplinks()
        return status, took


@asynccontextmanager
async def open_rig(options: Options) -> AsyncIterator[Soak]:
    """Set up the bridge, the homes, their agents and tokens, in a fresh folder; warm every
    session once and take the baseline. Everything started is stopped on the way out."""
    root = Path(tempfile.mkdtemp(prefix="ftwbridge-soak-"))
    children = Children()
    bridge = BridgeProc(root, dict(SETTINGS), children)
    fleet = Fleet(
        bridge,
        children,
        root,
        solo=options.solo,
        fleet=options.fleet,
        agents_per_home=options.agents,
        slow_ms=options.slow_ms,
    )
    load = Load(
        bridge.url,
        fleet,
        rate_per_s=options.rate_per_s,
        deadline_s=SETTINGS["call_deadline_s"],
        seed=options.seed,
    )
    ok = False
    try:
        await fleet.enroll()
        await bridge.start()
        await fleet.start()
        soak = Soak(options, root, children, bridge, fleet, load)
        soak.scenario = "setup"
        load.use_tools(await load.list_tools(fleet.agents[fleet.homes[0]][0]))
        async with trio.open_nursery() as nursery:
            for home in fleet.homes:
                for agent in fleet.agents[home]:
                    nursery.start_soon(soak.probe, home, agent)
        await soak.wait_uplinks()
        soak.baseline_fds = 10**6  # settle on the gauges alone, then take the baseline
        await soak.settle()
        soak.baseline_fds = bridge.fds()
        soak.baseline_rss = bridge.rss_bytes()
        yield soak
        ok = True
    finally:
        await children.aclose()
        fleet.close()
        if ok and not options.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"soak: state and logs kept in {root}", flush=True)
