"""Client ID Metadata Documents: a `client_id` that is an https URL names its own metadata.

The bridge fetches it with strict bounds: https only (http on a loopback host only when the
test profile allows it), no redirects followed, 5 s, 64 KiB, JSON only, and the document's
`client_id` must equal the URL. Documents are cached per their `Cache-Control: max-age`
(at most a day; 5 minutes when they say nothing).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx2
import trio

from ftwbridge.fairshare import SlotRefused, Slots

from .pinned import pinned_transport

MAX_BYTES = 64 * 1024
FETCH_S = 5.0
DEFAULT_CACHE_S = 300
MAX_CACHE_S = 86_400
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_CACHED = 1_000
MAX_FETCHES = 8
"""Documents fetched at once, all client addresses together; past it the address with the most
fetches under way loses its oldest (`fairshare.FairShare`), so slow documents named by a few
addresses cannot keep everyone else's sign-in waiting (docs/auth.md, "Limits that strangers
cannot fill")."""
MAX_FETCHES_PER_SOURCE = 2
"""Documents one client address may have fetched at once; one more is refused at once."""
BUSY = "the bridge is fetching too many client metadata documents for your address now; try again"
REFUSED = "the client's metadata document could not be used"
"""One message for every failure, so the answers tell nothing about what lies behind a URL."""


class DocumentRefused(Exception):
    """The document cannot be used; the message says why (shown to the person, escaped)."""


def is_document_url(client_id: str) -> bool:
    """Whether `client_id` is a URL that names a metadata document."""
    return client_id.startswith(("https://", "http://"))


class MetadataDocuments:
    """Fetches and caches client metadata documents.

    Args:
        allow_loopback_http: the test profile: http on a loopback host stands in for https.
        clock: trio's clock by default (seconds), for the cache.
    """

    def __init__(
        self, *, allow_loopback_http: bool = False, clock: Callable[[], float] = trio.current_time
    ) -> None:
        self._loopback = allow_loopback_http
        self._clock = clock
        self._cache: dict[str, tuple[dict[str, Any], float]] = {}
        self._fetches = Slots(MAX_FETCHES, MAX_FETCHES_PER_SOURCE)

    async def _check_url(self, url: str) -> str | None:
        """https with a path, to a host that resolves only to public addresses (no loopback,
        private, link-local or reserved ones: the bridge must not fetch inside its network).
        Returns the address the fetch must connect to (the first one checked), so the name is
        resolved once only (`pinned`); None for the test profile's http to a loopback host."""
        parts = urlsplit(url)
        if self._loopback and parts.scheme == "http" and (parts.hostname or "") in LOOPBACK:
            return None
        if (
            parts.scheme != "https"
            or not parts.hostname
            or parts.path in ("", "/")
            or parts.username
        ):
            raise DocumentRefused(REFUSED)
        try:
            infos = await trio.socket.getaddrinfo(
                parts.hostname, parts.port or 443, type=trio.socket.SOCK_STREAM
            )
        except OSError as exc:
            raise DocumentRefused(REFUSED) from exc
        addresses = [str(info[4][0]) for info in infos]
        if not addresses or not all(ipaddress.ip_address(a).is_global for a in addresses):
            raise DocumentRefused(REFUSED)
        return addresses[0]

    async def fetch(self, url: str, source: str = "-") -> dict[str, Any]:
        """The document at `url` as client metadata, fetched for client address `source`
        (`limits.client_address`) unless cached.

        Raises:
            DocumentRefused: any bound broken (`MAX_FETCHES_PER_SOURCE` included, or shed
                for a lighter address) or the document invalid.
        """
        hit = self._cache.get(url)
        if hit is not None and self._clock() < hit[1]:
            return hit[0]
        address = await self._check_url(url)
        try:
            with self._fetches.hold(source) as scope, scope:
                doc, cache_header = await self._get(url, address)
        except SlotRefused:
            raise DocumentRefused(BUSY) from None
        if scope.cancelled_caught:
            raise DocumentRefused(BUSY)
        m = re.search(r"max-age=(\d+)", cache_header)
        ttl = min(int(m.group(1)), MAX_CACHE_S) if m else DEFAULT_CACHE_S
        if "no-store" not in cache_header:
            while len(self._cache) >= MAX_CACHED:
                self._cache.pop(next(iter(self._cache)))
            self._cache[url] = (doc, self._clock() + ttl)
        return doc

    async def _get(self, url: str, address: str | None) -> tuple[dict[str, Any], str]:
        """GET `url`, connecting to `address` when given (`pinned_transport`), bounded."""
        body = b""
        host = urlsplit(url).hostname or ""
        transport = None if address is None else pinned_transport(host, address)
        try:
            with trio.fail_after(FETCH_S):
                async with (
                    httpx2.AsyncClient(
                        follow_redirects=False, timeout=FETCH_S, transport=transport
                    ) as http,
                    http.stream("GET", url, headers={"accept": "application/json"}) as r,
                ):
                    if r.status_code != 200:
                        raise DocumentRefused(REFUSED)
                    if (
                        not r.headers.get("content-type", "")
                        .split(";")[0]
                        .strip()
                        .lower()
                        .endswith("json")
                    ):
                        raise DocumentRefused(REFUSED)
                    async with contextlib.aclosing(r.aiter_bytes()) as chunks:
                        async for chunk in chunks:
                            body += chunk
                            if len(body) > MAX_BYTES:
                                raise DocumentRefused(REFUSED)
                    cache_header = r.headers.get("cache-control", "")
        except (trio.TooSlowError, httpx2.HTTPError) as exc:
            raise DocumentRefused(REFUSED) from exc
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise DocumentRefused(REFUSED) from exc
        if not isinstance(doc, dict) or doc.get("client_id") != url:
            raise DocumentRefused(REFUSED)
        return doc, cache_header
