"""What the home tells the sign-in: a claim code its box offers, a roster that lists a new
agent (the owner's yes), and `agent.denied` (the owner's no), each heard in the uplink's
reader (one process) or from the roster applier once the store has it (shared); see
`service.py`'s module docstring for where each lives. `OwnerAnswers` is built before the door,
which is handed its two listeners (`agent_denied`, `claim_offered`: `door.events.DoorEvents`)
at construction; `OAuthService` then shares its consent requests and its audit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from ftwbridge.proto.roster import Roster
from ftwbridge.store import StoreError

from .audit import SignInAudit, Step
from .model import OAuthStore, Pending
from .persist import CLAIM, CONSENT, pending_from, save_pending

log = logging.getLogger("ftwbridge.oauth")

READER_WRITE_S = 2.0
"""The longest a store write made in an uplink's reader (a claim offer, a denial) may hold
that home's traffic, seconds; past it the write is given up and logged."""


class OwnerAnswers:
    """The door's claim offers and the owner's answers applied to the consent requests.

    Args:
        store: where consent requests are written through (one process) or kept (shared).
        clock: the bridge's wall clock, ms since the epoch.
        shared: the store is the truth (many instances on PostgreSQL).
        on_signin: told (step, outcome) of each sign-in step (`audit.SignInAudit`).

    Attributes:
        pending: the consent requests held in memory (one process), by id; `OAuthService`
            opens and ends them.
        audit: the sign-in steps' audit, shared with `OAuthService`.
    """

    def __init__(
        self,
        *,
        store: OAuthStore,
        clock: Callable[[], int],
        shared: bool = False,
        on_signin: Callable[[str, str], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._shared = shared
        self.pending: dict[str, Pending] = {}
        self.audit = SignInAudit(on_signin)

    @property
    def claim_listener(self) -> Callable[[str, bytes, int], Awaitable[None]] | None:
        """The door's `claim_offered` listener: `claim_offered` when shared, else None (the
        door keeps one process's offers itself)."""
        return self.claim_offered if self._shared else None

    async def claim_offered(self, home: str, digest: bytes, expires_at_ms: int) -> None:
        """The door's `claim_offered` when shared: the box offers a claim code; it replaces the
        home's open offer in the store (one per home), so any instance can take it. In the
        uplink's reader: bounded by `READER_WRITE_S`; a store that fails is logged."""
        try:
            with trio.move_on_after(READER_WRITE_S):
                await self._store.drop_oauth_states(CLAIM, {"home": home})
                await self._store.put_oauth_state(
                    CLAIM, digest.hex(), {"home": home}, expires_at_ms
                )
                return
            why = f"the store took more than {READER_WRITE_S:g} s"
        except StoreError as exc:
            why = str(exc)
        log.warning(
            "claim offer of home %s not kept (%s): the code the home shows will not work; the"
            " owner asks the box for a new one",
            home,
            why,
        )

    async def on_roster(self, home: str, roster: Roster) -> None:
        """A new roster, in the uplink's reader (one process): requests whose agent it lists
        are approved; their code is made when delivered. Shared: nothing here, see
        `on_roster_saved`."""
        if self._shared:
            return
        listed = roster.agents()
        for pending in list(self.pending.values()):
            if pending.status == "asked" and pending.home == home and pending.agent_key in listed:
                pending.status = "approved"
                self.answered(pending, "approved")
                await save_pending(self._store, pending)

    async def on_roster_saved(self, home: str, roster: Roster) -> None:
        """A new roster of a home held here is in the store (the roster applier, shared only):
        the requests of that home asked of its owner whose agent it lists are approved in the
        store, wherever they were opened; the instance the browser polls delivers the code.
        After the store has the roster, so the instance that exchanges the code finds the
        agent listed. A store that fails is logged (the next roster approves them)."""
        if not self._shared:
            return
        listed = roster.agents()
        now = self._clock()
        try:
            asked = await self._store.find_oauth_states(
                CONSENT, now, {"home": home, "status": "asked"}
            )
            for req, record, _ in asked:
                key = record.get("agent_key")
                if not isinstance(key, str) or bytes.fromhex(key) not in listed:
                    continue
                if await self._store.change_oauth_state(
                    CONSENT, req, {"status": "approved"}, now, where={"status": "asked"}
                ):
                    self.answered(pending_from(record), "approved")
        except StoreError as exc:
            log.warning(
                "consents of home %s listed by roster seq %d not approved: %s",
                home,
                roster.seq,
                exc,
            )

    async def agent_denied(self, home: str, req: str) -> None:
        """The door's `agent_denied` (in the uplink's reader): the owner denied `req`. One
        process: in memory, written on the next read. Shared: in the store at once, bounded
        by `READER_WRITE_S`, so the browser polling another instance sees it."""
        if not self._shared:
            pending = self.pending.get(req)
            if pending is not None and pending.home == home and pending.status == "asked":
                pending.status = "denied"
                self.answered(pending, "denied")
            return
        try:
            with trio.move_on_after(READER_WRITE_S):
                record = await self._store.change_oauth_state(
                    CONSENT,
                    req,
                    {"status": "denied"},
                    self._clock(),
                    where={"home": home, "status": "asked"},
                )
                if record:
                    self.answered(pending_from(record), "denied")
                return
            why = f"the store took more than {READER_WRITE_S:g} s"
        except StoreError as exc:
            why = str(exc)
        log.warning("denial of consent request of home %s not kept (%s)", home, why)

    def answered(self, pending: Pending, outcome: str) -> None:
        """The home's owner answered `pending` (`approved` or `denied`): the `home` step."""
        self.audit.record(
            Step("home", outcome, pending.client_id, pending.home or "-", pending.source or "-")
        )
