"""This instance's claims in the directory, kept in step with the door's uplinks (issue 13
item 2): a claim when a home's uplink authenticates, a release when it ends, and the uplink
closed (4409) when another instance takes the home over.
"""

from __future__ import annotations

import logging

from ftwbridge.door import Door
from ftwbridge.store import StoreError
from ftwbridge.store.directory import Directory

log = logging.getLogger("ftwbridge.mesh")


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

    def holds(self, home: str, epoch: int) -> bool:
        """Whether this instance holds `home` at the claim `epoch` (no I/O)."""
        return self._claims.get(home) == epoch

    async def up(self, home: str) -> None:
        """The door's `on_up`: claim `home` (its next epoch). A database that does not answer
        is logged; the uplink serves calls that enter here meanwhile."""
        try:
            self._claims[home] = await self._directory.claim(home)
        except StoreError as exc:
            log.warning("home %s not claimed in the directory: %s", home, exc)

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
