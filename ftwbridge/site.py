"""What the HTTP shell needs once the listener is bound (`Site`): the public URL, the Host and
Origin it allows, and whose `X-Forwarded-For` names the client. `/mcp` (`mcp.asgi`), the front
page and the Quart app (`app.py`) share one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from quart import request

from ftwbridge.config import Config
from ftwbridge.oauth.limits import Network, client_address, trusted_networks

CLIENTS_KEPT = 4096
"""The most (peer, `X-Forwarded-For`) answers `Site.scope_client` keeps (all dropped past it)."""
CLIENT_KEY_BYTES = 256
"""The longest `X-Forwarded-For` values (all of a request's together, characters) whose answer
`Site.scope_client` keeps: longer ones are worked out each time, so that a peer sending large
distinct headers cannot make the bridge hold `CLIENTS_KEPT` copies of them."""


@dataclass(slots=True)
class Site:
    """What the shell needs once the listener is bound: the public URL and allowed Host/Origin."""

    public_url: str
    allowed_hosts: set[str] = field(default_factory=set)
    allowed_origins: set[str] = field(default_factory=set)
    trusted_proxies: tuple[Network, ...] = ()
    """Proxies whose `X-Forwarded-For` names the client (`client_address`)."""
    door_port: int = 0
    """The port the door's own listener bound (`door_bind`), once bound: the main listener's
    refusal of `/v1/box` names it."""
    _clients: dict[tuple[Any, tuple[str, ...]], str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """`scope_client`'s answers by (peer, `X-Forwarded-For` values), for `_clients_for`."""
    _clients_for: tuple[Network, ...] = field(default=(), init=False, repr=False, compare=False)

    @property
    def resource(self) -> str:
        """The `/mcp` URL: the OAuth resource and token audience (RFC 8707)."""
        return self.public_url.rstrip("/") + "/mcp"

    @property
    def metadata_url(self) -> str:
        """The RFC 9728 protected-resource metadata URL for `/mcp`."""
        return self.public_url.rstrip("/") + "/.well-known/oauth-protected-resource/mcp"

    def client(self) -> str:
        """The current request's client address, as the per-address limits key it."""
        return client_address(
            request.remote_addr, request.headers.getlist("x-forwarded-for"), self.trusted_proxies
        )

    def scope_client(self, scope: Any) -> str:
        """An ASGI scope's client address, as the per-address limits key it (`client_address`
        on its TCP peer and `X-Forwarded-For` headers). The answer depends on nothing else,
        so it is worked out once per peer and header values (at most `CLIENTS_KEPT` kept,
        forgotten when the trusted proxies change; values longer than `CLIENT_KEY_BYTES`
        are not kept)."""
        peer = (scope.get("client") or (None, 0))[0]
        forwarded = tuple(
            v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-forwarded-for"
        )
        if self._clients_for is not self.trusted_proxies or len(self._clients) >= CLIENTS_KEPT:
            self._clients.clear()
            self._clients_for = self.trusted_proxies
        if sum(len(v) + 1 for v in forwarded) > CLIENT_KEY_BYTES:  # each value, empty or not
            return client_address(peer, list(forwarded), self.trusted_proxies)
        key = (peer, forwarded)
        found = self._clients.get(key)
        if found is None:
            found = client_address(peer, list(forwarded), self.trusted_proxies)
            self._clients[key] = found
        return found

    def allow_url(self, url: str) -> None:
        """Allow the Host and Origin of `url` (scheme://host:port)."""
        parts = urlsplit(url)
        self.allowed_hosts.add(parts.netloc.lower())
        self.allowed_origins.add(f"{parts.scheme}://{parts.netloc}".lower())

    def listen_at(self, host: str, port: int, config: Config) -> None:
        """The public URL (port 0 made the bound `port`), and the hosts, origins and proxies
        `config` trusts, once the main listener is bound at `host`:`port`."""
        if self.public_url.endswith(":0"):
            self.public_url = self.public_url[:-2] + f":{port}"
        self.allow_url(self.public_url)
        for h in (host, "127.0.0.1", "localhost"):
            self.allowed_hosts.add(f"{h}:{port}")
        self.allowed_hosts.update(h.lower() for h in config.allowed_hosts)
        self.allowed_origins.update(o.lower().rstrip("/") for o in config.allowed_origins)
        self.trusted_proxies = trusted_networks(config.trusted_proxies)
