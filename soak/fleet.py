"""The soak's homes and agents, set up as an operator and the homes' owners would.

Homes are enrolled and agent keys made in the bridge's state folder before the bridge starts
(what `ftwbridge home enroll` and `ftwbridge agent create` do, in this process to save a
Python start per home); each home's owner then grants its agents at the stub's console
(`put_agents`), the roster travels box -> door -> store, and tokens are minted for the agents
the stored roster lists (what `ftwbridge token issue` does). Later changes (a revocation, a
new agent) go the same way while the bridge runs.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import trio

from ftwbridge.keys import KeysService
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.proto.roster import RosterRefused, verify_roster
from ftwbridge.store import SqliteStore, TokenRecord, hash_token
from stubbox.owner import Owner

from .procs import WAIT_S, BridgeProc, Children, StubProc

SCOPES = tuple(sorted(s.value for s in READ_SCOPES))
GRANT_MS = 86_400_000
"""How long the owners' grants last (ms): longer than any soak."""
TOKEN_MS = 4 * 3_600_000
"""How long the soak's tokens last (ms)."""


def wall_ms() -> int:
    """ms since the epoch."""
    return time.time_ns() // 1_000_000


@dataclass
class Agent:
    """One assistant at one home: its key, its token, and when its owner revoked it."""

    home: str
    id: str
    key: bytes
    token: str = ""
    revoked_at: float | None = None
    """trio clock seconds when the bridge held the roster without it (None: still granted)."""


@dataclass
class Fleet:
    """Every home of the soak, the stub processes that run them, and their agents.

    Args:
        bridge: the bridge they dial.
        solo: homes in a process each (`soak-s0`, ...): the ones a signal hits.
        fleet: homes in one `--fleet` process (`soak-f-0`, ...); 0 for none.
        agents: agents granted at each home.
        slow_ms: if set, one more home (`soak-slow`, a process of its own) takes this long
            per read; the regular load leaves it alone.

    Every stub keeps its homes' rosters in `root/stub-state` (`--state`), as a real box keeps
    its own across a restart.
    """

    bridge: BridgeProc
    children: Children
    root: Path
    solo: int
    fleet: int
    agents_per_home: int
    slow_ms: int | None = None
    stubs: list[StubProc] = field(default_factory=list)
    agents: dict[str, list[Agent]] = field(default_factory=dict)
    _turn: dict[str, int] = field(default_factory=dict)
    _made: int = 0

    def __post_init__(self) -> None:
        self.stubs = [StubProc(f"soak-s{i}") for i in range(self.solo)]
        if self.fleet == 1:
            self.stubs.append(StubProc("soak-f"))
        elif self.fleet > 1:
            self.stubs.append(StubProc("soak-f", fleet=self.fleet))
        if self.slow_ms is not None:
            self.stubs.append(StubProc("soak-slow", extra=("--delay-ms", str(self.slow_ms))))
        self.store = SqliteStore(self.bridge.state_dir / "bridge.sqlite")
        self.keys = KeysService(self.bridge.state_dir / "agent-keys.json")

    @property
    def state(self) -> Path:
        """The stubs' `--state` folder."""
        return self.root / "stub-state"

    @property
    def homes(self) -> list[str]:
        """Every home id."""
        return [h for stub in self.stubs for h in stub.homes]

    @property
    def load_homes(self) -> list[str]:
        """The homes the regular load reads (all but the slow one)."""
        return [h for h in self.homes if h != "soak-slow"]

    @property
    def solos(self) -> list[StubProc]:
        """The stubs that run one regular home each."""
        return [s for s in self.stubs if s.name.startswith("soak-s")]

    def stub_of(self, home: str) -> StubProc:
        return next(s for s in self.stubs if home in s.homes)

    def next_agent(self, home: str) -> Agent:
        """The home's agents in turn (the box serves each agent 60 reads a minute)."""
        turn = self._turn.get(home, 0)
        self._turn[home] = turn + 1
        agents = self.agents[home]
        return agents[turn % len(agents)]

    def close(self) -> None:
        self.store.close()

    async def _new_agent(self, home: str) -> Agent:
        self._made += 1
        return Agent(home, f"{home}-a{self._made}", await self.keys.create(home))

    async def enroll(self) -> None:
        """Enroll every home's key and make its agents' keys (before the bridge starts)."""
        for home in self.homes:
            await self.store.enroll_home(home, Owner(home, seed=home).home_public_key)
            self.agents[home] = [await self._new_agent(home) for _ in range(self.agents_per_home)]

    async def start(self) -> None:
        """Start every stub process, grant every home's agents, and mint their tokens."""
        async with trio.open_nursery() as nursery:
            for stub in self.stubs:
                nursery.start_soon(
                    stub.start, self.children, self.root, self.bridge.door_url, self.state
                )
        async with trio.open_nursery() as nursery:
            for home in self.homes:
                nursery.start_soon(self.grant, home)
        for agents in self.agents.values():
            for agent in agents:
                agent.token = await self.issue(agent)

    def _rows(self, agents: list[Agent]) -> list[dict[str, object]]:
        return [
            {
                "key": a.key.hex(),
                "id": a.id,
                "client": "soak",
                "name": f"Soak assistant {a.id}",
                "scopes": list(SCOPES),
                "expiresAtMs": wall_ms() + GRANT_MS,
            }
            for a in agents
            if a.revoked_at is None
        ]

    async def grant(self, home: str, agents: list[Agent] | None = None) -> None:
        """The owner grants `agents` (the home's, unless given) in one roster; returns once
        the bridge holds it."""
        rows = self._rows(self.agents[home] if agents is None else agents)
        await self.stub_of(home).console_do(home, {"op": "put_agents", "agents": rows})
        await self.wait_roster(home, agents)

    async def held_agents(self, home: str) -> set[bytes]:
        """The agent keys of the roster the bridge holds for `home` (from its store)."""
        held = await self.store.roster(home)
        key = await self.store.home_key(home)
        if held is None or key is None:
            return set()
        try:
            return set(verify_roster(held[1], home_key=key, home=home).agents())
        except RosterRefused:
            return set()

    async def wait_roster(self, home: str, agents: list[Agent] | None = None) -> None:
        """Wait until the bridge's roster for `home` lists exactly the granted ones of
        `agents` (the home's, unless given).

        Raises:
            trio.TooSlowError: not within `WAIT_S`.
        """
        agents = self.agents[home] if agents is None else agents
        want = {a.key for a in agents if a.revoked_at is None}
        with trio.fail_after(WAIT_S):
            while True:
                if await self.held_agents(home) == want:
                    return
                await trio.sleep(0.1)  # box -> door -> store: no event crosses the processes

    async def issue(self, agent: Agent) -> str:
        """A bearer token for `agent` (as `ftwbridge token issue` mints it)."""
        token = secrets.token_urlsafe(32)
        record = TokenRecord(
            agent.home, agent.id, agent.key, SCOPES, self.bridge.url, "soak", wall_ms() + TOKEN_MS
        )
        await self.store.put_token(hash_token(token), record)
        return token

    async def revoke(self, agent: Agent) -> None:
        """The owner removes `agent` at home; returns once the bridge holds that roster."""
        await self.stub_of(agent.home).console_do(
            agent.home, {"op": "drop_agent", "key": agent.key.hex()}
        )
        agent.revoked_at = trio.current_time()
        await self.wait_roster(agent.home)
        agent.revoked_at = trio.current_time()

    async def replace(self, agent: Agent) -> Agent:
        """A new agent takes a revoked one's place in the home's turn, once it has its token
        and the bridge holds the roster that grants it: the load reads the turn meanwhile,
        and a call made with no token yet never leaves the client (h11 refuses the empty
        `Bearer `), which the soak would count a connection broken."""
        new = await self._new_agent(agent.home)
        new.token = await self.issue(new)
        agents = self.agents[agent.home]
        await self.grant(agent.home, [*agents, new])
        agents[agents.index(agent)] = new
        return new

    async def wait_online(self, homes: list[str]) -> None:
        """Wait until each of `homes` has its uplink up and its roster answered by the bridge.

        Raises:
            trio.TooSlowError: not within `WAIT_S`.
        """
        with trio.fail_after(WAIT_S):
            for home in homes:
                stub = self.stub_of(home)
                while True:
                    status = await stub.console_do(home, {"op": "status"})
                    if status["connected"] and status["lastRosterReply"]:
                        break
                    await trio.sleep(0.1)  # the stub's uplink is another process's state

    async def restart(self, stub: StubProc) -> None:
        """Start a stopped stub again on the same state folder: its homes come back with the
        rosters their owners signed last (`--state`), which the bridge holds already.

        Raises:
            trio.TooSlowError: a home was not back within `WAIT_S`.
        """
        await stub.start(self.children, self.root, self.bridge.door_url, self.state)
        await self.wait_online(stub.homes)
        for home in stub.homes:
            await self.wait_roster(home)
