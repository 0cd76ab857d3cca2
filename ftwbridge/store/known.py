"""Every home's holder known in memory at each instance, so a forwarded call runs no database
query (docs/operations.md, "Many instances", "Who holds a home, in memory").

`KnownHolders` answers `holder(home)` from what it was told:

- a `takeover` event (`store/events.py`: every claim of a home's uplink, at any instance)
  names the home's holder and epoch; a later epoch replaces an earlier one, never the reverse;
- each lease renewal (`PgDirectory.renew`) hands it the instances present now (presence lock
  held and lease running) with their URLs: an entry naming an instance that is no longer
  present (stopped, `kill -9`ed, lease run out) is dropped there, so presence is checked once
  per renewal, not in each lookup;
- a home it knows nothing of is looked up once in the database (`lookup`), and the answer kept.

A wrong entry is corrected without any event: the holder answers a call addressed to an epoch
it no longer holds with 421 "moved", and a holder that cannot be reached is not trusted either;
both `forget` the entry, and the next lookup asks the database. An entry that sends calls
nowhere ("no one holds it", or "this instance", whose uplink may have ended since) is kept
only `NEGATIVE_S`, since no 421 can correct it. A gap in the events (`gap`: the LISTEN
connection was lost) forgets every entry. So a missed event costs at most one misrouted call
(a 421 or an unreachable holder, then one lookup) or `NEGATIVE_S` of "offline", never more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from .directory import Holder
from .events import Event

NEGATIVE_S = 1.0
"""How long "no instance holds this home" (or "this instance does") is believed without an
event, seconds: the longest a missed claim can leave a home answered as offline."""

Lookup = Callable[[str], Awaitable[Holder | None]]


@dataclass(frozen=True, slots=True)
class _Entry:
    instance: str | None  # None: no one holds it
    epoch: int
    until: float  # trio clock, s: believed until then (inf: until corrected)


class KnownHolders:
    """Holders of homes in memory, with the database as the fallback on a miss.

    Args:
        lookup: the database's lookup (`PgDirectory.holder`), for a home not known here;
            it raises `StoreError` when the database does not answer.
        instance_id: this instance's id.
        negative_s: see `NEGATIVE_S` (seconds).
    """

    def __init__(self, lookup: Lookup, *, instance_id: str, negative_s: float = NEGATIVE_S) -> None:
        self.instance_id = instance_id
        self._lookup = lookup
        self._negative_s = negative_s
        self._homes: dict[str, _Entry] = {}
        self._urls: dict[str, str] = {}  # present instances -> internal URL
        self._changes = 0
        self.lookups = 0
        """Database lookups made (misses), a counter that only grows."""

    async def holder(self, home: str) -> Holder | None:
        """The holder of `home` now: from memory, or (not known, or no longer believed) from
        one database lookup, whose answer is kept.

        Raises:
            StoreError: the home is not known here and the database does not answer.
        """
        now = trio.current_time()
        entry = self._homes.get(home)
        if entry is not None and now < entry.until:
            if entry.instance is None:
                return None
            url = self._urls.get(entry.instance)
            if url is not None:
                return Holder(entry.instance, entry.epoch, url)
        changes = self._changes
        self.lookups += 1
        found = await self._lookup(home)
        if self._changes == changes or home not in self._homes:
            self._learn(home, found, trio.current_time())
        return found

    def _learn(self, home: str, found: Holder | None, now: float) -> None:
        if found is None:
            self._homes[home] = _Entry(None, 0, now + self._negative_s)
            return
        self._urls[found.instance] = found.url  # the lookup counts present instances only
        self._put(home, found.instance, found.epoch, now)

    def _put(self, home: str, instance: str, epoch: int, now: float) -> None:
        until = now + self._negative_s if instance == self.instance_id else float("inf")
        self._homes[home] = _Entry(instance, epoch, until)

    def hear(self, event: Event) -> None:
        """A database event: a `takeover` names the home's holder at its epoch (kept unless a
        later epoch is known already); other kinds change no holder. Pure: no I/O."""
        if event.kind != "takeover":
            return
        instance, epoch = event.fields.get("instance"), event.fields.get("epoch")
        if not isinstance(instance, str) or not isinstance(epoch, int):
            return
        known = self._homes.get(event.home)
        if known is not None and known.instance is not None and known.epoch >= epoch:
            return
        self._changes += 1
        self._put(event.home, instance, epoch, trio.current_time())

    def forget(self, home: str, holder: Holder, *, unreachable: bool = False) -> None:
        """`holder` answered 421 for `home` (it no longer holds it at `holder.epoch`), or, with
        `unreachable`, could not be reached: the entry goes (unless a later claim replaced it
        meanwhile), and an unreachable instance is not named again until a lookup or the next
        renewal finds it present."""
        self._changes += 1
        entry = self._homes.get(home)
        if entry is not None and (entry.instance, entry.epoch) == (holder.instance, holder.epoch):
            del self._homes[home]
        if unreachable:
            self._urls.pop(holder.instance, None)

    def present(self, instances: dict[str, str]) -> None:
        """The instances present now, by id with their internal URL (each lease renewal):
        entries naming any other instance go."""
        self._changes += 1
        self._urls = dict(instances)
        gone = [h for h, e in self._homes.items() if e.instance and e.instance not in instances]
        for home in gone:
            del self._homes[home]

    def gap(self) -> None:
        """Events were lost: forget every home's entry (each is looked up again once)."""
        self._changes += 1
        self._homes.clear()

    def statistics(self) -> dict[str, int]:
        """Homes and instances known, and database lookups made so far."""
        return {"homes": len(self._homes), "instances": len(self._urls), "lookups": self.lookups}
