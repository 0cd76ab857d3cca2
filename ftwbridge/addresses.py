"""Listener addresses as settings write them: `host:port` (IPv6 in brackets), the URL a
listener bound there is reached at, and the keys part's `tcp://host:port` list. Each check
raises `ValueError` in words, so a bad setting is refused at load (`config.py`)."""

from __future__ import annotations

import ipaddress


def url_of_bind(address: str) -> str:
    """`http://host:port` for a listener bound at `address` (host:port), a wildcard host
    (0.0.0.0, ::) read as this machine's loopback, since no client can dial a wildcard.

    Raises:
        ValueError: `address` is not host:port (`split_address`).
    """
    host, port = split_address(address)
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{url_host(host)}:{port}"


def split_address(address: str) -> tuple[str, int]:
    """Split `host:port` (IPv6 in brackets: `[::1]:8780`) into host and port.

    An empty host means 127.0.0.1, as the listener has always taken it.

    Raises:
        ValueError: no port, a port that is not a number, or one outside 0 to 65535.
    """
    host, colon, port = address.strip().rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be host:port, such as 127.0.0.1:8780 (got {address!r})")
    return host.strip("[]") or "127.0.0.1", int(port)


def keys_addresses(url: str) -> list[tuple[str, int]]:
    """The (host, port) of each `tcp://host:port` in `keys_url` (comma-separated, in order).

    Raises:
        ValueError: an entry that is not `tcp://host:port`, or a port of 0.
    """
    found = []
    for entry in url.split(","):
        entry = entry.strip()
        rest = entry.removeprefix("tcp://")
        try:
            if rest == entry or not rest:
                raise ValueError
            host, port = split_address(rest)
        except ValueError:
            raise ValueError(
                f"must be tcp://host:port, several separated by commas (got {entry!r})"
            ) from None
        if port == 0:
            raise ValueError(f"must name a port other than 0 (got {entry!r})")
        found.append((host, port))
    return found


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """`host` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host
