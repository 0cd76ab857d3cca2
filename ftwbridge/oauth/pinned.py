"""An HTTP transport that connects to an address already checked, never resolving again.

The metadata-document fetch (`cimd`) resolves the document's host once and checks every
address is public. If the HTTP client resolved the name again to connect, a DNS-rebinding host
could answer with an inside address the second time. This transport dials the checked address
for that one host, and refuses any other host; TLS still verifies the certificate against the
host name (httpcore takes the server name from the URL, not from the address dialled).
"""

from __future__ import annotations

from collections.abc import Iterable

import httpcore2
import httpx2


class PinnedBackend(httpcore2.AsyncNetworkBackend):
    """A network backend for one host: every TCP connection to `host` goes to `address` (an IP
    literal), any other host or a Unix socket is refused with `httpcore2.ConnectError`."""

    def __init__(self, host: str, address: str) -> None:
        self._host = host.lower()
        self._address = address
        self._inner = httpcore2.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2.AsyncNetworkBackend signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Connect to the pinned address when `host` is the pinned host.

        Raises:
            httpcore2.ConnectError: another host, or the connection failed.
        """
        if host.lower() != self._host:
            raise httpcore2.ConnectError(f"only {self._host} may be reached through this client")
        return await self._inner.connect_tcp(
            self._address, port, timeout, local_address, socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2.AsyncNetworkBackend signature)
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Refused: the pinned client speaks TCP only.

        Raises:
            httpcore2.ConnectError: always.
        """
        raise httpcore2.ConnectError("no Unix sockets through this client")

    async def sleep(self, seconds: float) -> None:
        """Sleep on trio (httpcore's retry pacing)."""
        await self._inner.sleep(seconds)


def pinned_transport(host: str, address: str) -> httpx2.AsyncHTTPTransport:
    """An httpx transport whose connections to `host` dial `address` (see `PinnedBackend`),
    with certificate checks as usual and no proxies from the environment (a proxy would
    resolve the name itself). It swaps the transport's connection pool for one on the pinned
    backend: httpx2 2.16's `AsyncHTTPTransport` takes no network backend of its own."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=httpx2.create_ssl_context(trust_env=False),
        max_connections=1,
        network_backend=PinnedBackend(host, address),
    )
    return transport
