"""Per-address limits (sans-I/O): who is asking, and how often each address may ask.

Registration, opening consent requests and guessing claim codes are limited per client address
as well as for everyone (docs/auth.md, "bounds"), in buckets the store keeps (`OAuthLimits`), so
that on PostgreSQL every instance counts against the same limit. The address is the connection's peer, unless
that peer is one of the configured trusted proxies: then it is the rightmost `X-Forwarded-For`
entry that is not a trusted proxy (the nearest address no trusted party vouched for; entries to
its left may be forged by the client). IPv6 addresses count per /64, the block one subscriber
usually holds, so one host cannot step around its limit by changing its interface identifier.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from ftwbridge.store.base import StoreError
from ftwbridge.store.limits import LimitStore, Rate, limit_store

from .model import (
    GUESS_ADDRESS_BURST,
    GUESS_ADDRESS_PER_S,
    GUESS_BURST,
    GUESS_PER_S,
    GUESS_SHARE_BURST,
    GUESS_SHARE_PER_S,
    REGISTER_ADDRESS_BURST,
    REGISTER_ADDRESS_PER_S,
    REGISTER_BURST,
    REGISTER_PER_S,
    REGISTER_SHARE_BURST,
    REGISTER_SHARE_PER_S,
    START_ADDRESS_BURST,
    START_ADDRESS_PER_S,
    OAuthError,
)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
log = logging.getLogger("ftwbridge.oauth")


def trusted_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """Parse `trusted_proxies` entries (an IP or a CIDR block each).

    Raises:
        ValueError: an entry that is neither (the config check turns it into a sentence).
    """
    return tuple(ipaddress.ip_network(e.strip(), strict=False) for e in entries)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def client_address(peer: str | None, forwarded_for: list[str], trusted: tuple[Network, ...]) -> str:
    """The client's address as a limit key: an IPv4 address, an IPv6 /64, or `"unknown"`.

    Args:
        peer: the connection's peer address (no port), or None when the server does not know.
        forwarded_for: every `X-Forwarded-For` header value, in order (each comma-separated).
        trusted: the trusted proxies; `X-Forwarded-For` is read only when `peer` is one.
    """
    chain = [peer or ""]
    if peer is not None and _in(_ip(peer), trusted):
        hops = [h for v in forwarded_for for h in v.split(",") if h.strip()]
        chain = [peer, *reversed(hops)]
    found = None
    for hop in chain:
        found = _ip(hop)
        if found is None or not _in(found, trusted):
            break
    if found is None:
        return "unknown"
    if found.version == 6 and found.ipv4_mapped is None:
        return str(ipaddress.ip_network(f"{found}/64", strict=False))
    return str(found.ipv4_mapped or found) if found.version == 6 else str(found)


def _in(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None, nets: tuple[Network, ...]
) -> bool:
    return ip is not None and any(ip in n for n in nets if n.version == ip.version)


GUESSES, GUESSES_BY_ADDRESS = "guess", "guess-by-address"
REGISTRATIONS, REGISTRATIONS_BY_ADDRESS = "register", "register-by-address"
STARTS_BY_ADDRESS = "start-by-address"
GUESS_SHARES, REGISTER_SHARES = "guess-share", "register-share"
"""The limits' names in the store (`oauth_limits.name` on PostgreSQL). A `-share` limit is
each address's allowance while the limit for everyone is spent."""
EVERYONE = ""
"""The key of a limit that counts every client together."""
UNAVAILABLE = (
    "the sign-in limits cannot be checked now, as the bridge's database does not answer;"
    " try again in a few seconds"
)
GUESS_RATES = {
    GUESSES: Rate(GUESS_BURST, GUESS_PER_S),
    GUESSES_BY_ADDRESS: Rate(GUESS_ADDRESS_BURST, GUESS_ADDRESS_PER_S),
    GUESS_SHARES: Rate(GUESS_SHARE_BURST, GUESS_SHARE_PER_S),
}
REGISTER_RATES = {
    REGISTRATIONS: Rate(REGISTER_BURST, REGISTER_PER_S),
    REGISTRATIONS_BY_ADDRESS: Rate(REGISTER_ADDRESS_BURST, REGISTER_ADDRESS_PER_S),
    REGISTER_SHARES: Rate(REGISTER_SHARE_BURST, REGISTER_SHARE_PER_S),
}


@dataclass(frozen=True, slots=True)
class Taken:
    """What one counted ask took: the address, and the limits' names charged (given back
    with `OAuthLimits.right_guess` when the guess was right)."""

    address: str
    names: tuple[str, ...]


class OAuthLimits:
    """The authorization server's limits (docs/auth.md, "Bounds" and "Limits that strangers
    cannot fill"), kept in the store's buckets (`ftwbridge.store.limits`): shared by every
    instance on PostgreSQL, in memory on SQLite. Times are the bridge's wall clock, ms since
    the epoch.

    Each ask is charged to its address first (its own traffic), then to the limit for
    everyone; when that one is spent, the ask is charged to its address's small share
    instead, so the heaviest sources are refused first and an address that has not asked
    lately always gets through.

    When PostgreSQL does not answer, every check fails closed with 503: the guess limit is
    what keeps an 8-character claim code from being guessed, so it must not lapse while it
    cannot be counted, and a registration or a consent request needs the database next anyway.

    Args:
        store: the bridge's store; its kind chooses where the buckets live (`limit_store`).
    """

    def __init__(self, store: object) -> None:
        self._buckets: LimitStore = limit_store(store)

    async def _take(self, name: str, key: str, rate: Rate, now_ms: int) -> bool:
        try:
            return await self._buckets.take(name, key, rate, now_ms)
        except StoreError as exc:
            log.warning("a sign-in limit was not checked: %s", exc)
            raise OAuthError("temporarily_unavailable", UNAVAILABLE, 503) from None

    async def _give(self, name: str, key: str, rate: Rate, now_ms: int) -> None:
        try:
            await self._buckets.give(name, key, rate, now_ms)
        except StoreError as exc:  # the charge stays: stricter, never looser
            log.warning("a sign-in limit's charge was not given back: %s", exc)

    async def _take_fairly(self, rates: dict[str, Rate], address: str, now_ms: int) -> Taken | None:
        """Charge the address's own limit, then everyone's, else the address's share of a
        spent limit for everyone; None (nothing charged) when the address is past its own
        limit, or past its share while everyone's is spent."""
        everyone, by_address, share = list(rates)
        if not await self._take(by_address, address, rates[by_address], now_ms):
            return None
        if await self._take(everyone, EVERYONE, rates[everyone], now_ms):
            return Taken(address, (by_address, everyone))
        if await self._take(share, address, rates[share], now_ms):
            return Taken(address, (by_address, share))
        await self._give(by_address, address, rates[by_address], now_ms)
        return None

    async def guess(self, address: str, now_ms: int) -> Taken:
        """Count a claim-code guess from `address` before it is checked (PROTOCOL.md part C:
        the code is short, so wrong guesses are bounded across all consent requests and per
        address). A right guess is given back (`right_guess`).

        Raises:
            OAuthError: `temporarily_unavailable`, 429 past a limit, 503 when it cannot be
                counted.
        """
        taken = await self._take_fairly(GUESS_RATES, address, now_ms)
        if taken is None:
            raise OAuthError(
                "temporarily_unavailable",
                "too many wrong codes just now; try again in a minute",
                429,
            )
        return taken

    async def right_guess(self, taken: Taken, now_ms: int) -> None:
        """The guess `guess` counted was a code a home is showing: only wrong ones count."""
        for name in taken.names:
            key = EVERYONE if name == GUESSES else taken.address
            await self._give(name, key, GUESS_RATES[name], now_ms)

    async def register(self, address: str, now_ms: int) -> None:
        """Count a client registration (RFC 7591) from `address`.

        Raises:
            OAuthError: `temporarily_unavailable`, 429 past a limit, 503 when it cannot be
                counted.
        """
        if await self._take_fairly(REGISTER_RATES, address, now_ms) is None:
            raise OAuthError(
                "temporarily_unavailable", "too many registrations just now; try again soon", 429
            )

    async def start(self, address: str, now_ms: int) -> None:
        """Count a consent request opened from `address` (an `/authorize` request).

        Raises:
            OAuthError: `temporarily_unavailable`, 429 past the limit, 503 when it cannot be
                counted.
        """
        rate = Rate(START_ADDRESS_BURST, START_ADDRESS_PER_S)
        if not await self._take(STARTS_BY_ADDRESS, address, rate, now_ms):
            raise OAuthError(
                "temporarily_unavailable",
                "too many sign-ins from your address; try again soon",
                429,
            )
