"""The owner's changes at home, each run whole and one at a time (`OwnerChanges`, a part of
`uplink.StubHome`): the owner signs a new roster (an agent approved, narrowed or dropped, the
Noise key published or withdrawn), the state file is written, then the box adopts the roster
and the bridge hears of it, so no roster reaches the bridge that a restart would forget. A
change whose write fails is undone and the caller gets the `StateError`. Also the owner's
claim codes, denials and goal decisions (PROTOCOL.md parts C and E).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from ftwbridge.proto.claim import code_hash, new_code
from ftwbridge.proto.door import tun
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.roster import AgentGrant, verify_roster

from .box import Box
from .consent import grant_for
from .goals import GoalBook
from .owner import Owner
from .state import StateError, StateKeeper, encode_state, load_state

CLAIM_TTL_MS = 600_000
"""How long a claim code the owner is shown stays good, ms (PROTOCOL.md part C)."""


class OwnerChanges:
    """The owner's side of `StubHome` (module docstring); `StubHome` supplies the state."""

    owner: Owner
    box: Box
    requests: dict[str, dict[str, Any]]
    keeper: StateKeeper | None
    _changing: trio.Lock
    wall_ms: Callable[[], int]
    send: Callable[[bytes], Awaitable[None]]

    @property
    def home(self) -> str:
        """The home id."""
        return self.owner.home

    async def keep_state(self, path: Path) -> None:
        """Keep this home's owner state in the file `path` from now on: restore it when the
        file is there (its roster replaces the fresh one, and the next one the owner signs
        has a higher seq), then write it, which also shows at start that the file is writable.
        Call it before the uplink runs.

        Raises:
            StateError: the file cannot be read, is not usable, or cannot be written.
        """
        kept = await load_state(path, home=self.home, home_key=self.owner.home_public_key)
        if kept is not None:
            self.owner.restore(kept.roster)
            self.box.set_roster(self.owner.roster)  # no sessions yet: nothing to end
            self.requests = dict(kept.requests)
            self.box.goals = GoalBook(kept.goals)
            controls = self.box.home.controls
            controls.mode = kept.mode or controls.mode
            controls.targets = kept.targets if kept.targets is not None else controls.targets
        self.keeper = StateKeeper(path, self._state_bytes)
        await self.keeper.save()

    def _state_bytes(self) -> bytes:
        return encode_state(
            home=self.home,
            home_key=self.owner.home_public_key,
            signed=self.owner.signed,
            seq=self.owner.roster.seq,
            requests=self.requests,
            goals=self.box.goals.entries(),
            controls=self.box.home.controls,
        )

    async def _change(self, change: Callable[[], bytes | None]) -> None:
        """Run one owner change whole, one change at a time: `change` alters the owner's state
        and returns a newly signed roster (or None); the state file is written; then the box
        adopts the roster and the bridge hears of it. A failed write undoes the change.

        Raises:
            StateError: the state file could not be written; nothing changed.
        """
        async with self._changing:
            roster, signed, requests = self.owner.roster, self.owner.signed, dict(self.requests)
            new = change()
            if self.keeper is not None:
                try:
                    await self.keeper.save()
                except StateError:
                    self.owner.roster, self.owner.signed, self.requests = roster, signed, requests
                    raise
            if new is not None:
                await self.publish(new)

    async def publish(self, signed: bytes) -> None:
        """Adopt a newly signed roster at the box, then send it to the bridge."""
        roster = verify_roster(signed, home_key=self.owner.home_public_key, home=self.home)
        for sid, message in self.box.set_roster(roster):
            await self.send(tun(sid, message))
        await self.send(Envelope(Msg.ROSTER, None, {"roster": signed}).encode())

    async def put_agent(self, key: bytes, grant: AgentGrant) -> int:
        """Add or change an agent row (the owner approves at home); returns the roster seq.

        Raises:
            StateError: the state file could not be written; nothing changed.
        """
        await self._change(lambda: self.owner.put_agent(key, grant, now_ms=self.wall_ms()))
        return self.owner.roster.seq

    async def put_agents(self, rows: list[tuple[bytes, AgentGrant]]) -> int:
        """Add or change many agent rows in one signed roster; returns the roster seq.

        Raises:
            StateError: the state file could not be written; nothing changed.
        """

        def change() -> bytes | None:
            signed = None  # no rows: nothing to sign
            for key, grant in rows:
                signed = self.owner.put_agent(key, grant, now_ms=self.wall_ms())
            return signed

        await self._change(change)
        return self.owner.roster.seq

    async def claim(self) -> str:
        """Show a new home-claim code to the owner and offer its hash to the bridge (10 min)."""
        code = new_code()
        digest = code_hash(code)
        body = {"codeHash": digest, "expiresAtMs": self.wall_ms() + CLAIM_TTL_MS}
        await self.send(Envelope(Msg.CLAIM_OFFER, None, body).encode())
        return code

    async def approve(
        self,
        req: str,
        *,
        scopes: list[str] | None = None,
        expires_at_ms: int | None = None,
        reads_only: bool = False,
    ) -> int:
        """The owner approves request `req` (optionally narrowing scopes, for reads only, or
        setting the end): a new roster lists the agent with the grant `consent.grant_for`
        gives (the ops asked, unless `reads_only`). Returns the roster seq.

        Raises:
            KeyError: no such request.
            StateError: the state file could not be written; nothing changed.
        """

        def change() -> bytes:
            r = self.requests.pop(req)
            now = self.wall_ms()
            grant = grant_for(
                r, now_ms=now, scopes=scopes, reads_only=reads_only, expires_at_ms=expires_at_ms
            )
            return self.owner.put_agent(r["key"], grant, now_ms=now)

        await self._change(change)
        return self.owner.roster.seq

    async def deny(self, req: str) -> None:
        """The owner says no to request `req`; the bridge hears `agent.denied`.

        Raises:
            KeyError: no such request.
            StateError: the state file could not be written; nothing changed.
        """

        def change() -> None:
            del self.requests[req]

        await self._change(change)
        await self.send(Envelope(Msg.AGENT_DENIED, None, {"req": req}).encode())

    async def decide(self, req_id: str, approve: bool) -> dict[str, Any]:
        """The owner approves or denies goal request `req_id` (PROTOCOL.md part E): an approval
        makes the change as the owner; the state file is written, then the asking agent's open
        sessions hear `agent.decided`. Returns the request's `requests` entry.

        Raises:
            KeyError: no such request. ValueError: it is no longer waiting.
            StateError: the state file could not be written (the decision stands in memory).
        """
        async with self._changing:
            pushes = self.box.decide(req_id, approve, self.wall_ms())
            pushes += self.box.expire_goals(self.wall_ms())
            if self.keeper is not None:
                await self.keeper.save()
        for sid, message in pushes:
            await self.send(tun(sid, message))
        [entry] = [e for e in self.box.goals.entries() if e.record.req_id == req_id]
        return entry.record.to_body()

    async def drop_agent(self, key: bytes) -> int:
        """Drop an agent row; its sessions end `revoked`; returns the roster seq.

        Raises:
            StateError: the state file could not be written; nothing changed.
        """
        await self._change(lambda: self.owner.drop_agent(key, now_ms=self.wall_ms()))
        return self.owner.roster.seq

    async def set_noise(self, enabled: bool) -> int:
        """Publish (or withdraw) the box's Noise key; returns the roster seq.

        Raises:
            StateError: the state file could not be written; nothing changed.
        """
        await self._change(lambda: self.owner.set_noise(enabled, now_ms=self.wall_ms()))
        return self.owner.roster.seq
