"""Per-address limits (sans-I/O): who is asking, and how often each address may ask.

Registration, opening consent requests and guessing claim codes are limited per client address
as well as per process (docs/auth.md, "bounds"). The address is the connection's peer, unless
that peer is one of the configured trusted proxies: then it is the rightmost `X-Forwarded-For`
entry that is not a trusted proxy (the nearest address no trusted party vouched for; entries to
its left may be forged by the client). IPv6 addresses count per /64, the block one subscriber
usually holds, so one host cannot step around its limit by changing its interface identifier.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from collections.abc import Iterable

from ftwbridge.proto.pacing import TokenBucket

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_ADDRESSES = 10_000
"""Addresses remembered per limit; the least recently seen is forgotten first (memory bound;
the per-process limit still holds for whoever is forgotten)."""


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


class AddressLimit:
    """A token bucket per address: `burst` asks, then `rate` per second (monotonic seconds)."""

    def __init__(self, burst: float, rate: float, max_addresses: int = MAX_ADDRESSES) -> None:
        self._burst, self._rate, self._max = burst, rate, max_addresses
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def wait_s(self, address: str, now: float) -> float:
        """Seconds until `address` may ask again (0: now)."""
        bucket = self._buckets.get(address)
        return 0.0 if bucket is None else bucket.wait_s(now)

    def charge(self, address: str, now: float) -> None:
        """Count one ask from `address`."""
        bucket = self._buckets.pop(address, None) or TokenBucket(self._burst, self._rate)
        bucket.charge(now, 1)
        self._buckets[address] = bucket
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._buckets)
