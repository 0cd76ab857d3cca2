"""Real sockets on 127.0.0.1 port 0: the bridge in-process, stub homes in their own processes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from devtools.rig import console, grant_agent, start_stub
from ftwbridge.config import Config
from ftwbridge.run import Bridge

TOOL_NAMES = (
    "homes_list",
    "status",
    "chargers_list",
    "cars_list",
    "plan_get",
    "plan_explain",
    "history_query",
    "health_get",
    "events_list",
    "logs_tail",
    "drivers_status",
    "config_get",
    "diag_run",
    "energy_report",
    "charge_options",
)
"""The 15 read tools of PROTOCOL.md parts D and G, written once for the tests."""
CONTROL_NAMES = ("ev_charge_now", "ev_stop", "goal_request", "requests_list")
"""The control tools of PROTOCOL.md part E."""
READ_ONLY_NAMES = (*TOOL_NAMES, "requests_list")
"""The tools whose `readOnlyHint` is true."""

REAL_WAIT_S = 60.0
"""Bound on a real-time wait in the tests (a roster crossing processes, a stub home starting, a
client's session): generous enough to hold with both cores busy; a bound, never a measurement."""


@dataclass
class Home:
    """A stub home process and what the test needs of it."""

    name: str
    proc: trio.Process
    console_port: int
    home_key: bytes
    offset_ms: int = 0
    """How far the home's clock was moved (its console's `clock {offsetMs}`)."""

    async def console(self, **command: Any) -> Any:
        return await console(self.console_port, {"home": self.name} | command)


@dataclass
class Env:
    """One bridge and its homes."""

    bridge: Bridge
    nursery: trio.Nursery

    @property
    def url(self) -> str:
        return self.bridge.site.resource

    @property
    def door_url(self) -> str:
        """`ws://127.0.0.1:<port>/v1/box`: the door's own listener, which the boxes dial."""
        assert self.bridge.door_url is not None, "the bridge is serving"
        return self.bridge.door_url

    async def add_home(self, name: str, *args: str) -> Home:
        proc, line = await start_stub(self.nursery, self.door_url, *args, home=name)
        home = Home(name, proc, line["console"], bytes.fromhex(line["homeKey"]))
        await self.bridge.store.enroll_home(name, home.home_key)
        with trio.fail_after(REAL_WAIT_S):
            await self.bridge.door.wait_roster(name, lambda r: True)
        return home

    async def add_fleet(self, prefix: str, count: int, *args: str) -> list[Home]:
        """`count` homes in one stub process (`--fleet`), enrolled and online."""
        proc, line = await start_stub(
            self.nursery, self.door_url, "--fleet", str(count), *args, home=prefix
        )
        homes = []
        for row in line["fleet"]:
            home = Home(row["home"], proc, line["console"], bytes.fromhex(row["homeKey"]))
            await self.bridge.store.enroll_home(home.name, home.home_key)
            homes.append(home)
        with trio.fail_after(REAL_WAIT_S):
            for home in homes:
                await self.bridge.door.wait_roster(home.name, lambda r: True)
        return homes

    async def agent(
        self,
        home: Home,
        *,
        scopes: list[str] | None = None,
        ttl_ms: int = 3_600_000,
        ops: list[str] | None = None,
        caps: dict[str, int] | None = None,
    ) -> tuple[bytes, str, str]:
        """Grant a new agent at `home` (with `ops` and `caps`, for control); returns (agent
        key, agent id, bearer token)."""
        key, agent_id = await grant_agent(
            self.bridge,
            home.console_port,
            home.name,
            scopes=scopes,
            ttl_ms=ttl_ms,
            ops=ops,
            caps=caps,
        )
        roster = await self.bridge.door.roster(home.name)
        assert roster is not None
        token = await self.bridge.issue_token(home.name, key, agent_id, roster.agents()[key].scopes)
        return key, agent_id, token

    def http(self, token: str | None = None) -> httpx2.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0))

    def client(self, http: httpx2.AsyncClient, mode: str) -> Client:
        return Client(streamable_http_client(self.url, http_client=http), mode=mode)


async def start_env(nursery: trio.Nursery, tmp: Path, **config: Any) -> Env:
    settings: dict[str, Any] = {
        "admin_bind": "127.0.0.1:0",
        "bind": "127.0.0.1:0",
        "door_bind": "127.0.0.1:0",  # the door's own listener, which the boxes dial
        "public_url": "http://127.0.0.1:0",
    } | config
    cfg = Config(state_dir=tmp, **settings)
    bridge = Bridge(cfg)
    await nursery.start(bridge.serve)
    return Env(bridge, nursery)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
