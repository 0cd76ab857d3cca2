"""An in-memory rig: the real door, pool and keys part joined to a real stub home by memory
channels instead of a WebSocket, so timing tests run on trio's MockClock (autojump)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.door import Door
from ftwbridge.door.events import DoorEvents
from ftwbridge.door.wsock import SEND_S
from ftwbridge.keys import KeysService
from ftwbridge.keys.service import forget_dropped
from ftwbridge.pool import Pool
from ftwbridge.proto.names import Scope
from ftwbridge.proto.roster import AgentGrant, Roster
from ftwbridge.store import TokenRecord
from stubbox.uplink import StubHome

BASE_MS = 1_790_000_000_000
ALL_READS = tuple(s.value for s in Scope if s.value.endswith(".read") and "members" not in s.value)


class MemoryStore:
    """`Store` in memory (no threads, so MockClock's autojump stays exact)."""

    def __init__(self) -> None:
        self.homes: dict[str, bytes] = {}
        self.rosters: dict[str, tuple[int, bytes]] = {}
        self.tokens: dict[bytes, TokenRecord] = {}

    async def enroll_home(self, home: str, public_key: bytes) -> None:
        self.homes[home] = public_key

    async def home_key(self, home: str) -> bytes | None:
        return self.homes.get(home)

    async def put_roster(self, home: str, seq: int, signed: bytes) -> None:
        self.rosters[home] = (seq, signed)

    async def roster(self, home: str) -> tuple[int, bytes] | None:
        return self.rosters.get(home)

    async def put_token(self, token_hash: bytes, record: TokenRecord) -> None:
        self.tokens[token_hash] = record

    async def token(self, token_hash: bytes) -> TokenRecord | None:
        return self.tokens.get(token_hash)

    async def withdraw_agent_tokens(self, home: str, agent_key: bytes) -> int:
        mine = [h for h, r in self.tokens.items() if r.home == home and r.agent_key == agent_key]
        for h in mine:
            self.tokens[h] = dataclasses.replace(self.tokens[h], withdrawn=True)
        return len(mine)

    async def drop_agent_tokens(self, home: str, agent_key: bytes) -> int:
        gone = [h for h, r in self.tokens.items() if r.home == home and r.agent_key == agent_key]
        for h in gone:
            del self.tokens[h]
        return len(gone)


@dataclass
class Link:
    """Both ends of one in-memory uplink; `close_code` is what the door closed it with."""

    to_stub: Any
    from_door: Any
    to_door: Any
    from_stub: Any
    close_code: int | None = None
    closed: trio.Event = field(default_factory=trio.Event)
    sent: list[bytes] = field(default_factory=list)
    """Every message the door sent to the box, in order."""
    lock: trio.StrictFIFOLock = field(default_factory=trio.StrictFIFOLock)
    """The link's write lock, as `LeanSocket`'s (tests hold it to stand for a send under way)."""

    # door side (WebSocketLike)
    async def receive(self) -> bytes:
        return await self.from_stub.receive()  # type: ignore[no-any-return]

    async def send(self, data: bytes) -> None:
        """One message, by `LeanSocket.write`'s rule, which the door relies on: a free lock
        taken without a scheduler turn, FIFO behind a held one (cancelled there: nothing
        sent), then the write shielded and bounded by `SEND_S`; a box that takes nothing
        that long breaks the link."""
        if self.lock.locked():
            await self.lock.acquire()
        else:
            self.lock.acquire_nowait()
        try:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + SEND_S) as scope:
                self.sent.append(data)
                await self.to_stub.send(data)
        finally:
            self.lock.release()
        if scope.cancelled_caught:
            self.to_stub.close()
            self.to_door.close()
            raise trio.BrokenResourceError("the box took none of our bytes in time")

    async def close(self, code: int, reason: str = "") -> None:
        if self.close_code is None:
            self.close_code = code
        self.to_stub.close()
        self.to_door.close()
        self.closed.set()


class StubSide:
    """The stub's end of a `Link` (what trio-websocket's connection offers)."""

    def __init__(self, link: Link) -> None:
        self.link = link

    async def get_message(self) -> bytes:
        return await self.link.from_door.receive()  # type: ignore[no-any-return]

    async def send_message(self, data: bytes) -> None:
        await self.link.to_door.send(data)

    async def aclose(self, code: int = 1000) -> None:
        await self.link.close(code)


def wall_ms() -> int:
    """A wall clock tied to trio's clock (MockClock in tests)."""
    return BASE_MS + int(trio.current_time() * 1000)


class Rig:
    """Door, pool and keys part of a bridge, with stub homes joined in memory."""

    def __init__(
        self,
        nursery: trio.Nursery,
        config: Config | None = None,
        *,
        bridge_skew_ms: int = 0,
        door_cls: type[Door] = Door,
    ):
        self.nursery = nursery
        self.config = config or Config()
        self.store = MemoryStore()
        self.keys = KeysService(None)
        self.skew = bridge_skew_ms
        self.door = door_cls(
            config=self.config,
            store=self.store,
            events=DoorEvents(roster_taken=self._on_roster, roster_persisted=self._persist),
            wall_ms=self.bridge_ms,
        )
        self.pool = Pool(door=self.door, keys=self.keys, config=self.config, wall_ms=self.bridge_ms)
        self.links: list[Link] = []

    def bridge_ms(self) -> int:
        return wall_ms() + self.skew

    async def _on_roster(self, home: str, roster: Roster) -> None:
        await self.pool.on_roster(home, roster)

    async def _persist(self, home: str, roster: Roster, dropped: frozenset[bytes]) -> None:
        await forget_dropped(self.keys, home, frozenset(roster.agents()), dropped)

    async def start(self) -> None:
        await self.nursery.start(self.pool.run)
        await self.nursery.start(self.door.apply_rosters)

    async def add_home(self, home: str = "h1", **stub_args: Any) -> StubHome:
        stub = StubHome(home, seed=home, clock=wall_ms, **stub_args)
        await self.store.enroll_home(home, stub.owner.home_public_key)
        await self.connect(stub)
        return stub

    async def connect(self, stub: StubHome) -> Link:
        a_send, a_recv = trio.open_memory_channel[bytes](64)
        b_send, b_recv = trio.open_memory_channel[bytes](64)
        link = Link(a_send, a_recv, b_send, b_recv)
        self.links.append(link)

        async def door_side() -> None:
            try:
                await self.door.serve_uplink(link)
            except (trio.EndOfChannel, trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            finally:
                await link.close(1006)

        async def stub_side() -> None:
            try:
                await stub.run_session(StubSide(link))  # type: ignore[arg-type]
            except (trio.EndOfChannel, trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            finally:
                await link.close(1006)

        self.nursery.start_soon(door_side)
        self.nursery.start_soon(stub_side)
        with trio.fail_after(5):
            await self.door.wait_roster(stub.home, lambda r: r.seq >= stub.owner.roster.seq)
        return link

    async def grant(
        self,
        stub: StubHome,
        *,
        scopes: tuple[str, ...] = ALL_READS,
        ttl_ms: int = 3_600_000,
        **caps: int,
    ) -> tuple[bytes, AgentGrant]:
        key = await self.keys.create(stub.home)
        grant = AgentGrant(
            "a-" + key[:3].hex(),
            "test",
            "Test assistant",
            scopes,
            (),
            dict(caps),
            wall_ms(),
            wall_ms() + ttl_ms,
        )
        await stub.put_agent(key, grant)
        with trio.fail_after(5):
            await self.door.wait_roster(stub.home, lambda r: key in r.agents())
        return key, grant
