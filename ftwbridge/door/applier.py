"""The roster applier's queue (docs/architecture.md, "A pooled session's states"): which homes have an accepted roster that is
not stored yet, in the order they first waited, and the agents dropped since each home's last
save. The door takes a roster in the uplink's reader and hands it here; one task (`run`) saves
each home's newest, so a slow disk never holds a home's traffic. No I/O of its own: `save` does
it. A newer roster waiting replaces an older one (the store keeps only the newest); a save that
fails is kept and tried again every `RETRY_S`, and at once when the box sends a roster (so a
roster taken on a full disk or during a database outage is saved once space or the database
returns, with no word from the box).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import trio

from ftwbridge.proto.roster import Roster
from ftwbridge.statewords import Trouble, trouble_of

log = logging.getLogger("ftwbridge.door")
RETRY_S = 5.0
"""How long a failed save waits before it is tried again (seconds)."""
TROUBLE_WORDS = {
    Trouble.FULL: "the disk holding the state is full; free space there",
    Trouble.READ_ONLY: "the state folder cannot be written; let the bridge write it",
    Trouble.DAMAGED: "the database is damaged; restore it from a backup",
}

Save = Callable[[str, Roster, frozenset[bytes]], Awaitable[None]]
"""(home, newest roster, agent keys dropped since the last save) -> stored and applied."""


class RosterApplier:
    """Per-home rosters waiting to be saved by `save`, one home at a time, in order."""

    def __init__(self, save: Save) -> None:
        self._save = save
        self._unsaved: dict[str, tuple[Roster, frozenset[bytes]]] = {}
        self._failed: dict[str, tuple[Roster, frozenset[bytes]]] = {}
        self._saving: str | None = None
        self._changed = trio.Event()
        self._retry_at = math.inf
        """When the failed saves are next tried (trio clock, seconds)."""

    def add(self, home: str, roster: Roster, held: Roster | None) -> None:
        """`roster` replaced `held` (None: the first) in memory: save it, with the agents it
        dropped and those any roster of `home` still unsaved (or failed) dropped."""
        dropped = frozenset(held.agents()) - frozenset(roster.agents()) if held else frozenset()
        for before in (self._unsaved.get(home), self._failed.pop(home, None)):
            if before is not None:
                dropped |= before[1]
        self._unsaved[home] = (roster, dropped)
        self._notify()

    def retry(self, home: str, held: Roster) -> None:
        """The box sent `held` again: if its save failed, try again now."""
        if home in self._failed:
            self.add(home, held, None)

    @property
    def unsaved(self) -> int:
        """Homes whose newest accepted roster is not saved yet (waiting, being saved, or
        failed and waiting for its next try)."""
        return len(self._unsaved) + len(self._failed) + (self._saving is not None)

    async def saved(self) -> None:
        """Try the failed saves again now, and wait until nothing is left to save (the caller
        bounds the time: on a disk still full this waits for good)."""
        self._retry_failed()
        while self.unsaved:
            await self._changed.wait()

    def _retry_failed(self) -> None:
        """Queue the failed saves again (a home with a newer roster waiting keeps it, with the
        agents the failed one dropped)."""
        for home, (roster, dropped) in self._failed.items():
            newer = self._unsaved.get(home)
            self._unsaved[home] = (
                (roster, dropped) if newer is None else (newer[0], newer[1] | dropped)
            )
        if self._failed:
            self._failed.clear()
            self._notify()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Save each waiting home's newest roster until cancelled; a failed save is logged
        with its home (and, for state trouble, what to do) and tried again after `RETRY_S`."""
        task_status.started()
        while True:
            if self._failed and trio.current_time() >= self._retry_at:
                self._retry_failed()  # on time, however busy the other homes keep it
            if not self._unsaved:
                with trio.move_on_at(self._retry_at if self._failed else math.inf):
                    await self._changed.wait()
                continue
            home = next(iter(self._unsaved))
            roster, dropped = self._unsaved.pop(home)
            self._saving = home
            try:
                await self._save(home, roster, dropped)
            except Exception as exc:  # the applier outlives one bad write; the reason is logged
                if not self._failed:
                    self._retry_at = trio.current_time() + RETRY_S
                self._failed[home] = (roster, dropped)
                kind = trouble_of(exc)
                log.error(
                    "roster seq %d of home %s is in effect but was not saved (%s: %s%s); it is"
                    " tried again every %g s",
                    roster.seq,
                    home,
                    type(exc).__name__,
                    exc,
                    "" if kind is None else f"; {TROUBLE_WORDS[kind]}",
                    RETRY_S,
                )
            finally:
                self._saving = None
                self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
