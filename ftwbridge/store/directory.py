"""The directory: which instance holds which home's uplink (docs/architecture.md, "When the home's uplink is at another instance").

An instance claims a home when the home's uplink authenticates there and releases it when the
uplink ends. Every claim takes the home's next epoch, so a message addressed to a holder "at
epoch E" can be refused once a later claim (a takeover by another instance) has happened. A
holder learns that it lost a home from `Directory.serve`'s `on_lost` (PostgreSQL: at the next
lease renewal; events on `store/events.py` make it sooner) and closes that uplink (4409).

`LocalDirectory` is the embedded default: one process, so every uplink is its own.
`PgDirectory` (`ftwbridge.store.pg_directory`) is the cluster's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

OnLost = Callable[[str], Awaitable[None]]
"""Called with a home another instance took over (the caller closes its uplink, 4409)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a home's uplink now: the `instance` id, the `epoch` of its claim, and the
    instance's internal `url` (where forwarded calls go; "" in one process)."""

    instance: str
    epoch: int
    url: str


class Directory(Protocol):
    """Which instance holds which home's uplink, with an epoch per home that grows on every
    claim."""

    @property
    def instance_id(self) -> str:
        """This instance's id."""
        ...

    async def serve(
        self, on_lost: OnLost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Until cancelled: keep this instance present (and its lease renewed), and call
        `on_lost(home)` for each home another instance took over from it. Reports started
        once this instance is present and may claim.

        Raises:
            StoreError: (before started) this instance cannot become present, e.g. another
                running instance has its id.
        """
        ...

    async def claim(self, home: str) -> int:
        """This instance now holds `home`'s uplink (taking it over from any other); returns
        the claim's epoch, greater than every earlier one of the home."""
        ...

    async def release(self, home: str, epoch: int) -> bool:
        """The uplink of `home` claimed at `epoch` ended: forget it, unless a later claim
        (another instance's, or a newer uplink here) holds the home now. Returns whether it
        was still this claim."""
        ...

    async def holder(self, home: str) -> Holder | None:
        """The home's holder now, or None when no live instance holds it."""
        ...


class Holders(Protocol):
    """Where calls for a home go: its holder, looked up (`store/known.KnownHolders` keeps them
    in memory), and told when a holder proved wrong."""

    @property
    def instance_id(self) -> str:
        """This instance's id."""
        ...

    async def holder(self, home: str) -> Holder | None:
        """The home's holder now, or None when no live instance holds it.

        Raises:
            StoreError: the database was asked and does not answer.
        """
        ...

    def forget(self, home: str, holder: Holder, *, unreachable: bool = False) -> None:
        """`holder` answered 421 "moved" for `home`, or (`unreachable`) was not reached: the
        next lookup must not name it again on what was known."""
        ...


class LocalDirectory:
    """`Directory` of one process: every home whose uplink is here is held here, and no one
    else can take one over."""

    instance_id = "local"

    def __init__(self) -> None:
        self._epochs: dict[str, int] = {}
        self._held: dict[str, int] = {}

    async def serve(
        self, on_lost: OnLost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """See `Directory.serve`: nothing to keep; no home is ever lost."""
        task_status.started()
        await trio.sleep_forever()

    async def claim(self, home: str) -> int:
        """See `Directory.claim`."""
        epoch = self._epochs.get(home, 0) + 1
        self._epochs[home] = self._held[home] = epoch
        return epoch

    async def release(self, home: str, epoch: int) -> bool:
        """See `Directory.release`."""
        if self._held.get(home) != epoch:
            return False
        del self._held[home]
        return True

    async def holder(self, home: str) -> Holder | None:
        """See `Directory.holder`."""
        epoch = self._held.get(home)
        return None if epoch is None else Holder(self.instance_id, epoch, "")

    def forget(self, home: str, holder: Holder, *, unreachable: bool = False) -> None:
        """See `Holders.forget`: nothing is kept beyond the truth here."""
