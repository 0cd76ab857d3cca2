"""This instance's claims in the directory, kept in step with the door's uplinks: a claim when a home's uplink authenticates, a release when it ends, and the uplink
closed (4409) when another instance takes the home over.
"""

from __future__ import annotations

import logging

import trio

from ftwbridge.door import Door
from ftwbridge.store import StoreError
from ftwbridge.store.directory import Directory

log = logging.getLogger("ftwbridge.mesh")

CLAIM_WAIT_S = 2.0
"""The longest `holds` waits for a claim of the home under way here, seconds."""


class Holdings:
    """The homes this instance holds, by the epoch of its claim.

    Args:
        directory: the cluster's directory.
        door: this instance's door (its uplinks are closed on a takeover).
    """

    def __init__(self, directory: Directory, door: Door) -> None:
        self._directory = directory
        self._door = door
        self._claims: dict[str, int] = {}
        self._claiming: dict[str, trio.Event] = {}

    async def holds(self, home: str, epoch: int) -> bool:
        """Whether this instance holds `home` at the claim `epoch`. A claim of the home under
        way here is waited for (at most `CLAIM_WAIT_S`): a forward can name its epoch, read
        from the database, a moment before `claim` has returned it here."""
        claiming = self._claiming.get(home)
        if claiming is not None and self._claims.get(home) != epoch:
            with trio.move_on_after(CLAIM_WAIT_S):
                await claiming.wait()
        return self._claims.get(home) == epoch

    async def up(self, home: str) -> None:
        """The door's `on_up`: claim `home` (its next epoch). A database that does not answer
        is logged; the uplink serves calls that enter here meanwhile."""
        done = self._claiming[home] = trio.Event()
        try:
            self._claims[home] = await self._directory.claim(home)
        except StoreError as exc:
            log.warning("home %s not claimed in the directory: %s", home, exc)
        finally:
            done.set()
            if self._claiming.get(home) is done:
                del self._claiming[home]

    async def down(self, home: str) -> None:
        """The door's `on_down`: release this instance's claim of `home`, if it still holds it
        (a database that does not answer is logged; the lease ends the claim)."""
        epoch = self._claims.pop(home, None)
        if epoch is None:
            return
        try:
            await self._directory.release(home, epoch)
        except StoreError as exc:
            log.warning("home %s not released in the directory: %s", home, exc)

    async def lost(self, home: str) -> None:
        """Another instance took `home` over (the directory's `on_lost`, or its `takeover`
        event): forget the claim and close the uplink here with 4409."""
        if self._claims.pop(home, None) is not None:
            log.info("home %s taken over at another instance; its uplink here is closed", home)
        await self._door.supersede(home)
