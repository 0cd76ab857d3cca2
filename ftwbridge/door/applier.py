"""The roster applier's queue (docs/architecture.md, "A pooled session's states"): which homes have an accepted roster that is
not stored yet, in the order they first waited, and the agents dropped since each home's last
save. The door takes a roster in the uplink's reader and hands it here; one task (`run`) saves
each home's newest, so a slow disk never holds a home's traffic. No I/O of its own: `save` does
it. A newer roster waiting replaces an older one (the store keeps only the newest); a save that
fails is kept and tried again when the box sends a roster (at the latest when it reconnects).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from ftwbridge.proto.roster import Roster

log = logging.getLogger("ftwbridge.door")

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
        """Homes whose newest accepted roster is not saved yet."""
        return len(self._unsaved) + (self._saving is not None)

    async def saved(self) -> None:
        """Wait until nothing is left to save (the caller bounds the time)."""
        while self.unsaved:
            await self._changed.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Save each waiting home's newest roster until cancelled; a failed save is logged
        with its home and the applier goes on."""
        task_status.started()
        while True:
            while not self._unsaved:
                await self._changed.wait()
            home = next(iter(self._unsaved))
            roster, dropped = self._unsaved.pop(home)
            self._saving = home
            try:
                await self._save(home, roster, dropped)
            except Exception as exc:  # the applier outlives one bad write; the reason is logged
                self._failed[home] = (roster, dropped)
                log.error(
                    "roster seq %d of home %s was not saved (%s: %s); it is saved again when "
                    "the box next sends a roster (at the latest when it reconnects)",
                    roster.seq,
                    home,
                    type(exc).__name__,
                    exc,
                )
            finally:
                self._saving = None
                self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
