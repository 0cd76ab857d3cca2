"""Rosters and home keys at the door (PROTOCOL.md part C; docs/operations.md, "A
re-enrolled home key").

One `Rosters` per `Door`, which holds it and delegates to it. It keeps each home's Ed25519
key (read from the store once, then held), takes the signed rosters a box sends in its
uplink's reader (verified against that key, never older than the one held), holds the newest
per home in memory, answers `roster(home)` from memory or else the store, wakes
`wait_roster`, remembers a box whose roster is older than the held one ("behind"), and hands
each accepted roster to the roster applier (`applier.py`), which stores it away from the
reader. Uplinks, their tunnels and their limits stay in `door.py`; where a change reaches
both (a home key re-enrolled, a roster forgotten, an uplink gone) the door passes in what it
knows of its uplinks.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Container
from dataclasses import dataclass, field

import trio

from ftwbridge.proto.errors import RemoteProtocolError
from ftwbridge.proto.roster import (
    AgentGrant,
    Roster,
    RosterProblem,
    RosterRefused,
    verify_roster,
)
from ftwbridge.store import Store

from .applier import RosterApplier
from .events import DoorEvents
from .refusals import RefusalLog, RosterBehind
from .stats import DoorStats

log = logging.getLogger("ftwbridge.door")
REREAD_S = 1.0
"""The most often `grant` reads a home's roster from the store again for a row the held copy
lacks (seconds, per home)."""
REREAD_HOMES = 10_000
"""Homes whose last re-read time is kept at most (then the record starts afresh)."""
HOME_KEY_CHECK_S = 1.0
"""How often `watch_home_keys` asks the store whether another process wrote it (seconds)."""

KeyChanged = Callable[[str], Awaitable[None]]
"""(home): awaited once the held key of `home` has changed and been logged."""


@dataclass(slots=True)
class Rosters:
    """The door's rosters and home keys, per home.

    Args:
        store: home keys and newest rosters.
        stats: the door's counters; this counts rosters refused (by code) and home keys
            changed in them.
        events: the door's listeners (`events.DoorEvents`); this tells `roster_taken` in the
            uplink's reader once a newer roster is accepted and held in memory, and
            `roster_persisted` from the roster applier (`apply_rosters`) after the store has
            the roster: the slow effects (the keys part's sync, dropping tokens), in order per
            home, with the agents dropped since the last save.
        refusal_log: the door's rate-limited warnings (one per home and kind a minute), shared
            with the uplinks' refusals.

    A roster takes effect for admission when its uplink's reader accepts it; the store write
    and `roster_persisted` follow in `apply_rosters`, one task in the bridge's nursery, so a
    slow disk or keys part never holds a home's traffic.
    """

    store: Store
    stats: DoorStats = field(default_factory=DoorStats)
    events: DoorEvents = field(default_factory=DoorEvents)
    refusal_log: RefusalLog = field(default_factory=RefusalLog)
    _rosters: dict[str, Roster] = field(default_factory=dict)
    _home_keys: dict[str, bytes] = field(default_factory=dict)
    _roster_changed: dict[str, trio.Event] = field(default_factory=dict)
    _applier: RosterApplier = field(init=False)
    _behind: dict[str, RosterBehind] = field(default_factory=dict)
    """Homes whose box's roster is older than the held one (see `roster_behind`)."""
    _reread_at: dict[str, float] = field(default_factory=dict)
    """When `grant` last read each home's roster again from the store (trio clock, seconds)."""
    _forgets: dict[str | None, int] = field(default_factory=dict)
    """How many times `forget_roster` has run, per home (None: for every home at once); a store
    read that a forget of its home overtook is not held (see `roster`)."""

    def __post_init__(self) -> None:
        self._applier = RosterApplier(self._save_roster)

    async def _save_roster(self, home: str, roster: Roster, dropped: frozenset[bytes]) -> None:
        """Store `roster` unless the store holds a newer one by its verified signed `seq`
        (another instance saved the box's later roster while this save waited, e.g. through
        a database outage): only signed data decides, and an older roster never replaces a
        newer one (docs/operations.md, "Only signed data decides")."""
        newer = await self._stored_newer(home, roster)
        if newer is not None:
            log.info(
                "roster seq %d of home %s not saved: the store holds seq %d, signed later",
                roster.seq,
                home,
                newer.seq,
            )
            return
        await self.store.put_roster(home, roster.seq, roster.signed)
        if self.events.roster_persisted is not None:
            await self.events.roster_persisted(home, roster, dropped)

    async def _stored_newer(self, home: str, roster: Roster) -> Roster | None:
        """The store's roster of `home` when it verifies with the home's key and its signed
        `seq` is above `roster`'s, else None (the store's `seq` column is not read)."""
        stored = await self.store.roster(home)
        key = self._home_keys.get(home)
        if stored is None or key is None or stored[1] == roster.signed:
            return None
        try:
            held = verify_roster(stored[1], home_key=key, home=home)
        except RosterRefused:
            return None
        return held if held.seq > roster.seq else None

    async def apply_rosters(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The roster applier (`door.applier`), until cancelled: each home's newest accepted
        roster is stored, then `events.roster_persisted` runs with the agents dropped since the last save."""
        await self._applier.run(task_status=task_status)

    @property
    def rosters_unsaved(self) -> int:
        """Homes whose newest accepted roster the applier has not finished yet."""
        return self._applier.unsaved

    async def rosters_saved(self) -> None:
        """Wait until the applier has nothing left to store (the caller bounds the time)."""
        await self._applier.saved()

    async def home_key(self, home: str) -> bytes | None:
        """`home`'s Ed25519 public key (32 bytes), held once read from the store, or None
        when the home is not enrolled."""
        key = self._home_keys.get(home)
        if key is None:
            key = await self.store.home_key(home)
            if key is not None:
                self._home_keys[home] = key
        return key

    async def roster(self, home: str) -> Roster | None:
        """The newest verified roster of `home` (from memory, else from the store), or None.

        A roster read from the store is held in memory from then on, unless `forget_roster`
        ran during the read: the read may have begun before another instance saved a newer
        roster (whose `roster` event is what forgot), so it is returned but not held, and the
        next look reads the store again.
        """
        cached = self._rosters.get(home)
        if cached is not None:
            return cached
        forgets = self._forgot(home)
        stored = await self.store.roster(home)
        key = await self.home_key(home)
        if stored is None or key is None:
            return None
        try:
            roster = verify_roster(stored[1], home_key=key, home=home)
        except RosterRefused:
            return None
        newer = self._rosters.get(home)  # the box's roster may have come during the reads
        if newer is not None and newer.seq >= roster.seq:
            return newer
        if forgets == self._forgot(home):
            self._rosters[home] = roster
        return roster

    async def grant(
        self, home: str, agent_key: bytes, *, here: Container[str]
    ) -> AgentGrant | None:
        """The row of the agent `agent_key` (32 bytes) in `home`'s newest roster, or None.

        A copy held for a home whose uplink is not `here` can be older than the store's:
        another instance saved a roster listing a new agent (and minted its token) before its
        `roster` event arrived here. A row that copy lacks is looked for once more in the
        store, at most every `REREAD_S` per home, so a withdrawn agent's requests cannot turn
        into a store read each. A home whose uplink is here has the box's own newest roster.
        """
        roster = await self.roster(home)
        grant = None if roster is None else roster.agents().get(agent_key)
        if grant is not None or roster is None or home in here:
            return grant
        now = trio.current_time()
        if now - self._reread_at.get(home, -REREAD_S) < REREAD_S:
            return None
        if len(self._reread_at) >= REREAD_HOMES:
            self._reread_at.clear()
        self._reread_at[home] = now
        self._rosters.pop(home, None)
        roster = await self.roster(home)
        return None if roster is None else roster.agents().get(agent_key)

    def forget_roster(self, home: str | None, *, keep: Container[str]) -> None:
        """Drop the roster held in memory for `home` (None: for every home) unless the home is
        in `keep` (the homes whose uplink is here); the next look reads it from the store, and
        `wait_roster` callers of those homes look again (the store may hold a newer roster:
        another instance's `roster` event, or events lost)."""
        if len(self._forgets) >= REREAD_HOMES:  # start afresh, as if every home was forgotten
            self._forgets = {None: self._forgets.get(None, 0) + 1}
        self._forgets[home] = self._forgets.get(home, 0) + 1
        homes = [home] if home is not None else [*self._rosters, *self._roster_changed]
        for h in homes:
            if h not in keep:
                self._rosters.pop(h, None)
                changed = self._roster_changed.pop(h, None)
                if changed is not None:
                    changed.set()

    def _forgot(self, home: str) -> tuple[int, int]:
        """A mark that changes whenever `forget_roster` runs for `home` or for every home."""
        return self._forgets.get(None, 0), self._forgets.get(home, 0)

    async def wait_roster(self, home: str, accept: Callable[[Roster], bool]) -> Roster:
        """Wait until `home`'s newest roster satisfies `accept`; returns it (caller bounds time).
        It looks again when the box sends a newer roster here (`take_roster`) and when the
        held copy is forgotten (`forget_roster`: another instance saved one)."""
        while True:
            changed = self._roster_changed.setdefault(home, trio.Event())  # before the look: a
            roster = await self.roster(home)  # roster taken during it still wakes us
            if roster is not None and accept(roster):
                return roster
            await changed.wait()

    async def take_roster(self, home: str, signed: bytes) -> tuple[bool, int, str]:
        """Verify and keep a roster from `home`'s box; returns (accepted, seq, refusal code)."""
        key = await self.home_key(home)
        held = await self.roster(home)
        if held is not None and signed == held.signed:
            self._behind.pop(home, None)
            self._applier.retry(home, held)  # a save that failed is tried again now
            return True, held.seq, ""  # the same roster again (a box reconnecting): nothing new
        try:
            if key is None:
                raise RemoteProtocolError("unknown home")
            roster = verify_roster(
                signed, home_key=key, home=home, held_seq=None if held is None else held.seq
            )
        except RosterRefused as exc:
            self.count_refused(exc.problem.value)
            if exc.problem is RosterProblem.STALE_SEQ and key is not None and held is not None:
                self._box_behind(home, signed, key, held)
            return False, held.seq if held else 0, exc.problem.value
        self._behind.pop(home, None)
        self._rosters[home] = roster
        if self.events.roster_taken is not None:
            await self.events.roster_taken(home, roster)
        self._roster_changed.pop(home, trio.Event()).set()  # waiters see it in effect
        self._applier.add(home, roster, held)  # stored and synced by `apply_rosters`
        return True, roster.seq, ""

    def count_refused(self, code: str) -> None:
        """Count one roster refused with `code` (a `RosterProblem` value) in `stats`."""
        self.stats.rosters_refused += 1
        by = self.stats.rosters_refused_by
        by[code] = by.get(code, 0) + 1

    def _box_behind(self, home: str, signed: bytes, key: bytes, held: Roster) -> None:
        """The box sent a roster older than the held one (`stale_seq`): remember which agents
        its own roster lists, so calls of the others are refused in words at once instead of
        waiting `handshake_s` for a box that will not answer them, and warn (rate-limited)."""
        try:
            theirs = verify_roster(signed, home_key=key, home=home)
        except RosterRefused:
            return  # not the home's own older roster: refused, nothing to learn from it
        self._behind[home] = RosterBehind(theirs.seq, held.seq, frozenset(theirs.agents()))
        self.refusal_log.warn(
            "stale_seq",
            home,
            "roster refused home=%s: stale_seq: the box sent roster seq %d, the bridge holds "
            "seq %d; the box has lost its roster (reset, or restored from an old backup): "
            "assistants its roster does not list are refused until its owner approves them "
            'again at home (docs/operations.md, "When something is wrong")',
            home,
            theirs.seq,
            held.seq,
        )

    def roster_behind(self, home: str, agent_key: bytes) -> RosterBehind | None:
        """Whether `home`'s box sent an older roster than the held one that does not list
        `agent_key` (its box would not answer that agent's handshake), or None."""
        behind = self._behind.get(home)
        if behind is None or agent_key in behind.box_agents:
            return None
        return behind

    def forget_behind(self, home: str) -> None:
        """`home`'s uplink ended: its box is no longer behind here (its next uplink sends its
        roster again)."""
        self._behind.pop(home, None)

    @property
    def rosters_behind_count(self) -> int:
        """Homes whose connected box sent an older roster than the held one."""
        return len(self._behind)

    async def watch_home_keys(
        self,
        check: Callable[[], Awaitable[object]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: every `HOME_KEY_CHECK_S` seconds ask the store whether another
        process has written it (`Store.write_mark`, e.g. `ftwbridge home enroll`), and if so
        await `check` (the door's `check_home_keys`), which applies changed home keys at once.
        This is how a key re-enrolled by the command line reaches the running bridge."""
        mark = await self.store.write_mark()
        task_status.started()
        while True:
            await trio.sleep(HOME_KEY_CHECK_S)
            now = await self.store.write_mark()
            if now != mark:
                mark = now
                await check()

    async def check_home_keys(self, online: Collection[str], on_changed: KeyChanged) -> list[str]:
        """Compare the home keys held here, and those of the homes in `online` (those with an
        uplink), with the store's; for each home whose key changed (or went): use the new key
        from now on, forget the held roster (the old key signed it; the box's next roster,
        verified by the new key, is taken whatever its `seq`) and whether its box was behind,
        count and log it, then await `on_changed` (the door closes the home's uplink).
        Returns the homes changed, in order."""
        homes = sorted(set(self._home_keys) | set(online))
        if not homes:
            return []
        keys = await self.store.home_keys(homes)
        changed = [h for h in homes if keys.get(h) != self._home_keys.get(h)]
        for home in changed:
            new = keys.get(home)
            if new is None:
                self._home_keys.pop(home, None)
            else:
                self._home_keys[home] = new
            self.stats.home_key_changes += 1
            self._rosters.pop(home, None)
            self._behind.pop(home, None)
            log.warning(
                "home key changed home=%s (%s): %s; the new key verifies its next uplink and "
                "roster",
                home,
                "re-enrolled" if new is not None else "no longer enrolled",
                "its uplink is closed" if home in online else "it has no uplink now",
            )
            await on_changed(home)
        return changed
