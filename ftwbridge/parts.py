"""The bridge's parts that take most settings, each built from the `Config` and the parts it
uses (`run.Bridge` composes them): `/mcp`'s service, its listen streams, and the sign-in's
authorization server."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ftwbridge.config import Config
from ftwbridge.config_rules import mesh_key_bytes
from ftwbridge.door import Door
from ftwbridge.door.listener import DoorListener
from ftwbridge.keys import KeysPort
from ftwbridge.lifecycle import StartupError
from ftwbridge.mcp.affinity import HomeTags
from ftwbridge.mcp.auth import TokenCache, TokenMinter
from ftwbridge.mcp.forwarding import MeshPort
from ftwbridge.mcp.listen import ListenMetrics, Listens
from ftwbridge.mcp.server import McpService
from ftwbridge.metrics import Metrics
from ftwbridge.oauth import OAuthService
from ftwbridge.oauth.answers import OwnerAnswers
from ftwbridge.oauth.cimd import MetadataDocuments
from ftwbridge.oauth.limits import client_address
from ftwbridge.oauth.model import OAuthStore
from ftwbridge.pool import Pool
from ftwbridge.site import Site
from ftwbridge.startup import bind, door_listener
from ftwbridge.store import BridgeStore

if TYPE_CHECKING:
    from ftwbridge.mesh.node import Node


def mcp_service(
    c: Config,
    *,
    pool: Pool,
    tokens: TokenCache,
    site: Site,
    clock: Callable[[], int],
    metrics: Metrics,
    roster_behind: Callable[[str, bytes], Any],
    mesh: MeshPort | None,
    listens: Listens,
    holder: Callable[[str], str | None] | None = None,
) -> McpService:
    """`/mcp` (`mcp.server.McpService`) with the settings of `c`: the pool is its homes port
    and its live feeds, `tokens` checks bearer tokens (or a forwarded token's digest),
    `site` names the resource, `metrics` hears every call and request, `mesh` forwards to
    another instance (many instances), `listens` serves `subscriptions/listen`, `holder`
    names this instance on the answers of the homes it holds (`mcp/affinity.py`)."""
    return McpService(
        homes=pool,
        verify_token=tokens.verify,
        verify_digest=tokens.verify_digest,
        resource=site.resource,
        resource_metadata=site.metadata_url,
        max_body_bytes=c.max_body_bytes,
        call_deadline_s=c.call_deadline_s,
        wall_ms=clock,
        http_burst=c.http_burst,
        http_per_s=c.http_per_s,
        on_call=metrics.on_call,
        on_request=metrics.on_request,
        roster_behind=roster_behind,
        anonymous_token=c.test_anonymous_token,
        confirm_ttl_s=c.confirm_ttl_s if c.confirm_commands != "off" else None,
        confirm_mode=c.confirm_commands,
        mesh=mesh,
        clock_skew_ms=c.clock_skew_max_ms,
        listen=listens,
        live=pool.feeds,
        holder=holder,
    )


def listen_streams(
    c: Config,
    *,
    pool: Pool,
    clock: Callable[[], int],
    held: Callable[[str], Awaitable[bool]],
    metrics: Metrics,
) -> Listens:
    """`subscriptions/listen` streams (`mcp/listen.py`) over the pool's live feeds, their
    counts registered with `metrics`; on many instances (`database_url`) a stream of a home
    `held` elsewhere (`held(home)` true) is not served here."""
    listens = Listens(
        feeds=pool.feeds,
        config=c,
        wall_ms=clock,
        held_elsewhere=held if c.database_url is not None else None,
    )
    metrics.registry.register(ListenMetrics(listens))
    return listens


def token_minter(
    c: Config, *, store: BridgeStore, site: Site, clock: Callable[[], int]
) -> TokenMinter:
    """Mints `/mcp`'s access tokens (`mcp/auth.py`) for `site`'s resource, `token_ttl_s`
    long, kept by their hash in `store`; with a `mesh_key`, each carries its home's tag for
    the balancer (`mcp/affinity.py`)."""
    return TokenMinter(
        put=store.put_token,
        resource=lambda: site.resource,
        ttl_s=c.token_ttl_s,
        wall_ms=clock,
        tag=None if c.mesh_key is None else HomeTags(mesh_key_bytes(c.mesh_key)).tag,
    )


def sign_in(
    c: Config,
    *,
    store: OAuthStore,
    keys: KeysPort,
    door: Door,
    site: Site,
    clock: Callable[[], int],
    minter: TokenMinter,
    tokens: TokenCache,
    answers: OwnerAnswers,
) -> OAuthService:
    """The authorization server (`oauth/service.py`) with the settings of `c`: `minter`
    issues its access tokens, a revocation empties `tokens`, `answers` (built before the
    door) holds the consent requests; the store is shared on many instances."""
    return OAuthService(
        store=store,
        keys=keys,
        door=door,
        issuer=lambda: site.public_url.rstrip("/"),
        resource=lambda: site.resource,
        clock=clock,
        issue_access=minter.mint,
        on_revoke=tokens.clear,
        refresh_grace_ms=c.refresh_grace_ms,
        shared=c.database_url is not None,
        answers=answers,
        documents=MetadataDocuments(allow_loopback_http=c.test_loopback_metadata)
        if c.client_metadata_documents
        else None,
    )


def door_part(c: Config, door: Door, site: Site, metrics: Metrics) -> DoorListener:
    """The door's own listener (`door_bind`, `startup.door_listener`): its faults and
    connections counted in `metrics`, a box's address read through `site`'s trusted proxies."""
    return door_listener(
        c,
        door,
        on_fault=metrics.on_connection_fault,
        exempt=site.trusted_proxies,
        source=lambda peer, forwarded: client_address(peer, forwarded, site.trusted_proxies),
        connections=metrics.listener("door"),
    )


def cluster_node(
    c: Config, store: BridgeStore, door: Door, clock: Callable[[], int], port: int, main_fd: int
) -> Node:
    """This instance's part in the cluster (`ftwbridge.mesh.node`) on its PostgreSQL `store`,
    its internal listener bound when `internal_bind` is set.

    Raises:
        StartupError: the internal listener cannot bind; `main_fd` (the main listener's
            socket, not yet hypercorn's) is closed.
    """
    from ftwbridge.mesh.node import Node
    from ftwbridge.store.postgres import PgStore

    assert isinstance(store, PgStore)
    try:
        return Node.bound(
            config=c,
            store=store,
            door=door,
            wall_ms=clock,
            port=port,
            bind=lambda address: bind(address, "internal", "internal_bind", c.listen_backlog),
        )
    except StartupError:
        socket.close(main_fd)
        raise
