"""Slots shared by sources so that none of them can hold all of them (docs/operations.md,
"Limits that strangers cannot fill").

A bound counted for everyone (connections not yet authenticated, fetches under way) turns into
a lockout when strangers can fill it cheaply. `FairShare` (sans-I/O) keeps such a bound per
source as well as in total, and when the total is full it sheds the heaviest source first:
the source holding the most slots gives up its oldest one, so a source that holds none (a
first request) always gets in. A source at its own bound, or holding at least as many slots
as any other while the total is full, is refused: that is its own traffic.

`Slots` is its trio shell: each holder is a `trio.CancelScope`, cancelled when shed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

import trio

T = TypeVar("T")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def source_key(host: str, exempt: Iterable[Network] = ()) -> str | None:
    """The source a peer address counts as: the address itself, an IPv6 address per /64 (the
    block one subscriber usually holds, so changing the interface id is no new source), the
    text as given when it is no address; None when it is in `exempt` (not counted)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if any(ip in net for net in exempt if net.version == ip.version):
        return None
    if ip.version == 6:
        mapped = ip.ipv4_mapped
        if mapped is not None:
            return str(mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class FairShare(Generic[T]):
    """At most `total` holders at once, at most `per_source` of them from one source.

    Args:
        total: holders at once, all sources together (above 0).
        per_source: holders at once from one source (above 0, at most `total`).

    Raises:
        ValueError: a bound that is not as above.
    """

    def __init__(self, total: int, per_source: int) -> None:
        if not 0 < per_source <= total:
            raise ValueError("the bounds must be 0 < per_source <= total")
        self.total = total
        self.per_source = per_source
        self._held: dict[str, dict[T, None]] = {}  # per source, oldest first
        self._count = 0

    def __len__(self) -> int:
        """Holders now."""
        return self._count

    def held_by(self, source: str) -> int:
        """Holders of `source` now."""
        return len(self._held.get(source, ()))

    def admit(self, source: str, holder: T) -> list[T] | None:
        """Add `holder` of `source`: the holders it displaced (shed: they no longer count and
        should be ended), or None when it is refused (nothing changed).

        Refused: `source` already holds `per_source`, or the total is full and no other
        source holds more than `source` does.
        """
        mine = self.held_by(source)
        if mine >= self.per_source:
            return None
        shed: list[T] = []
        if self._count >= self.total:
            heaviest = max(
                (s for s in self._held if s != source),
                key=lambda s: len(self._held[s]),
                default=None,
            )
            if heaviest is None or len(self._held[heaviest]) <= mine:
                return None
            victim = next(iter(self._held[heaviest]))
            self.release(heaviest, victim)
            shed.append(victim)
        self._held.setdefault(source, {})[holder] = None
        self._count += 1
        return shed

    def release(self, source: str, holder: T) -> None:
        """Remove `holder` of `source`; nothing happens when it was shed or never admitted."""
        held = self._held.get(source)
        if held is None or holder not in held:
            return
        del held[holder]
        self._count -= 1
        if not held:
            del self._held[source]


class SlotRefused(Exception):
    """`Slots.hold` refused a source (at its own bound, or the heaviest of a full total)."""


class Slots:
    """`FairShare` for trio tasks: `hold(source)` gives a cancel scope that is cancelled if
    a lighter source's arrival sheds it (`shed` is then true on it).

    Args:
        total, per_source: `FairShare`'s bounds.
    """

    def __init__(self, total: int, per_source: int) -> None:
        self.share: FairShare[trio.CancelScope] = FairShare(total, per_source)
        self.shed = 0
        """Holders shed so far (they only grow)."""

    @contextmanager
    def hold(self, source: str) -> Iterator[trio.CancelScope]:
        """A slot for `source` for the `with` block: enter the scope it yields around the
        work a shed must stop, then `scope.cancelled_caught` says whether it was shed.

        Raises:
            SlotRefused: on entry, when `FairShare.admit` refuses `source`.
        """
        scope = trio.CancelScope()
        displaced = self.share.admit(source, scope)
        if displaced is None:
            raise SlotRefused(source)
        for victim in displaced:
            self.shed += 1
            victim.cancel()
        try:
            yield scope
        finally:
            self.share.release(source, scope)
