"""The composition root: one nursery that owns the store, keys part, door, pool and HTTP server.

`Bridge.serve(task_status=...)` binds the listener first (so port 0 works and the public URL
is known), starts the pool, then hypercorn's trio worker, and reports the `Bridge` as started.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ftwbridge import edge
from ftwbridge.app import Site, create_app
from ftwbridge.checks import ReadyChecks
from ftwbridge.config import Config
from ftwbridge.door import Door
from ftwbridge.door.events import DoorEvents
from ftwbridge.door.listener import serve_door_listener
from ftwbridge.keys import KeysPort
from ftwbridge.keys.remote import RemoteKeys
from ftwbridge.keys.service import forget_dropped
from ftwbridge.lifecycle import StartupError
from ftwbridge.mcp.affinity import holder_here
from ftwbridge.mcp.auth import TokenCache
from ftwbridge.mcp.server import McpService
from ftwbridge.metrics import Metrics, create_admin_app
from ftwbridge.oauth.answers import OwnerAnswers
from ftwbridge.parts import (
    cluster_node,
    door_part,
    listen_streams,
    mcp_service,
    sign_in,
    token_minter,
)
from ftwbridge.pool import Pool
from ftwbridge.proto.roster import Roster
from ftwbridge.startup import (
    admin_listener,
    bind,
    bind_admin,
    bind_door,
    keys_part,
    main_listener,
    serving_state,
)
from ftwbridge.statewatch import StateWatch, one_bridge
from ftwbridge.status import Status
from ftwbridge.store import BridgeStore, StoreError, open_store

if TYPE_CHECKING:
    from ftwbridge.mesh.node import Node
    from ftwbridge.store.events import Event

log = logging.getLogger("ftwbridge")


CLOSE_GOING_AWAY = 1001
"""The uplinks' Close code at drain (RFC 6455 section 7.4.1): a box redials (another instance)."""
HTTP_STOP_S = 3.0
"""The most `drain` waits for the HTTP server's graceful stop (its own bound is 1 s)."""


def wall_ms() -> int:
    """The bridge's wall clock: ms since the Unix epoch."""
    return time.time_ns() // 1_000_000


class Bridge:
    """One bridge process's parts. After `serve` reports started: `site`, `store`, `keys`,
    `door`, `pool` are live, and `issue_token` mints development tokens.

    The door's listeners are given to it here (`door.events.DoorEvents`): who hears of
    rosters, faults and uplinks is read in `__init__`.

    Args:
        config: the validated configuration.
        clock: the wall clock in ms since the epoch (tests inject one).
        keys: a keys part to use instead of the one `config` names (benchmarks).

    Raises:
        StartupError: `kek` is set (`keys_part`).
    """

    admin_url: str | None = None
    """The admin listener's URL, once bound (`admin_bind`)."""
    door_url: str | None = None
    """`ws://host:port/v1/box` of the door's own listener (`door_bind`), once serving."""
    state_watch: StateWatch | None = None
    """The embedded bridge's watch on its state folder, once serving."""
    node: Node | None = None
    """This instance's part in a cluster (on PostgreSQL), once `serve` has started."""
    _nursery: trio.Nursery | None = None

    def __init__(
        self, config: Config, *, clock: Callable[[], int] = wall_ms, keys: KeysPort | None = None
    ) -> None:
        self.config = config
        self.clock = clock
        self.site = Site(config.site_url)
        self.store: BridgeStore = open_store(config.database_url, Path(config.state_dir))
        self.keys: KeysPort = keys if keys is not None else keys_part(config)
        self.tokens = TokenCache(self.store.token)
        self.minter = token_minter(config, store=self.store, site=self.site, clock=clock)
        self.metrics = Metrics()
        self.answers = OwnerAnswers(
            store=self.store,
            clock=clock,
            shared=config.database_url is not None,
            on_signin=self.metrics.on_signin,
        )
        """The home's answers to sign-ins: claim offers, approvals, denials (`oauth/answers.py`)."""
        self.door = Door(
            config=config,
            store=self.store,
            events=DoorEvents(
                roster_taken=self._on_roster,  # the pool, sign-ins and cached tokens
                roster_persisted=self._persist_roster,  # sign-ins, the keys part, the store
                fault=self.metrics.on_connection_fault,
                uplink_up=self._uplink_up,  # the cluster directory (`mesh.holdings`)
                uplink_down=self._uplink_down,
                agent_denied=self.answers.agent_denied,  # sign-ins
                claim_offered=self.answers.claim_listener,  # many instances: to the store
            ),
            wall_ms=clock,
        )
        self.pool = Pool(
            door=self.door, keys=self.keys, config=config, wall_ms=clock, observer=self.metrics
        )
        self.metrics.watch(self.pool, self.door, self.keys)
        self.checks = ReadyChecks(
            store=self.store,
            keys=self.keys,
            keys_socket=config.keys_socket,
            draining=lambda: self.pool.draining,
            state_dir=Path(config.state_dir),
        )
        self.listens = listen_streams(
            config, pool=self.pool, clock=clock, held=self._held_elsewhere, metrics=self.metrics
        )
        """`subscriptions/listen` streams (`mcp/listen.py`, docs/live.md)."""
        self.oauth = sign_in(
            config,
            store=self.store,
            keys=self.keys,
            door=self.door,
            site=self.site,
            clock=clock,
            minter=self.minter,
            tokens=self.tokens,
            answers=self.answers,
        )
        self._stop_http = trio.Event()
        self._http_done = trio.Event()

    async def _on_roster(self, home: str, roster: Roster) -> None:
        """In the uplink's reader, no I/O: sessions and cached tokens of dropped agents end now,
        and consent requests the roster approves get their code."""
        await self.pool.on_roster(home, roster)
        await self.answers.on_roster(home, roster)
        self.tokens.forget_unlisted(home, roster.agents())

    async def _uplink_up(self, home: str) -> None:
        """A home's uplink is this instance's: the cluster directory claims it (on PostgreSQL)."""
        if self.node is not None:
            await self.node.holdings.up(home)

    async def _uplink_down(self, home: str) -> None:
        """A home's uplink here has ended: the cluster directory releases it (on PostgreSQL)."""
        if self.node is not None:
            await self.node.holdings.down(home)

    async def _persist_roster(self, home: str, roster: Roster, dropped: frozenset[bytes]) -> None:
        """In the roster applier, after the store has the roster: consent requests it approves
        are marked in the store (many instances), the keys part forgets the keys of agents no
        longer listed, and the store the tokens of every agent `dropped` since."""
        await self.answers.on_roster_saved(home, roster)
        for key in await forget_dropped(self.keys, home, frozenset(roster.agents()), dropped):
            await self.store.withdraw_agent_tokens(home, key)
            await self.store.drop_refresh_of_agent(home, key)

    async def _on_event(self, event: Event) -> None:
        """An event another instance (or the command line) made, on PostgreSQL
        (`ftwbridge.store.events`): a revocation drops every cached token now, an enrolment
        has the door compare its home keys now. A database that fails meanwhile is logged."""
        try:
            if self.node is not None:
                await self.node.hear(event)
            if event.kind == "revoke":
                self.tokens.clear()
            elif event.kind == "enroll":
                await self.door.check_home_keys()
        except StoreError as exc:
            log.warning("event %s of home %s not applied: %s", event.kind, event.home, exc)

    async def _on_gap(self) -> None:
        """Events were lost with the LISTEN connection: drop the cached tokens and compare
        the home keys before trusting either again."""
        self.tokens.clear()
        if self.node is not None:
            self.node.gap()
        try:
            await self.door.check_home_keys()
        except StoreError as exc:
            log.warning("home keys not compared after the events' gap: %s", exc)

    async def issue_token(
        self,
        home: str,
        agent_key: bytes,
        agent_id: str,
        scopes: tuple[str, ...],
        *,
        client: str = "dev",
    ) -> str:
        """Mint an access token for `/mcp` bound to home, agent, scopes and this resource.

        Returns the token text; only its SHA-256 is stored. Lifetime: `token_ttl_s`.
        """
        return await self.minter.mint(home, agent_key, agent_id, scopes, client)

    async def _held_elsewhere(self, home: str) -> bool:
        """For a listen stream on many instances: this instance does not hold the home's
        uplink (another holds it, or it is offline), so the stream is not served here."""
        return not self.door.online(home)

    async def drain(self) -> None:
        """Stop taking calls, let calls in flight finish (`drain_s`), end every session with
        `tun.end {restarting}`, close every uplink with a Close 1001 (going away), let the HTTP
        responses under way finish whole, then stop serving."""
        log.info("draining")
        self.listens.drain()  # every listen stream ends with its graceful result
        with trio.move_on_after(HTTP_STOP_S):
            await self.listens.wait_streams_at_most(0)
        await self.pool.drain(self.config.drain_s)
        await self.door.close_all(CLOSE_GOING_AWAY, "the bridge is restarting")
        self._stop_http.set()  # hypercorn stops accepting and lets responses under way finish
        with trio.move_on_after(HTTP_STOP_S):
            await self._http_done.wait()
        with trio.move_on_after(HTTP_STOP_S):  # rosters accepted so far reach the disk
            await self.door.rosters_saved()
        with trio.move_on_after(HTTP_STOP_S):  # homes' open claim codes work after a restart
            await self.oauth.save_claims()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _serve_http(
        self, app: Any, config: edge.EdgeConfig, *, task_status: trio.TaskStatus[Any]
    ) -> None:
        """hypercorn for the main listener, stopped gracefully by `drain` (its
        `graceful_timeout` lets responses under way end whole: docs/operations.md, "Signals")."""
        try:
            await edge.serve(
                app, config, shutdown_trigger=self._stop_http.wait, task_status=task_status
            )
        finally:
            self._http_done.set()

    async def serve(
        self, *, task_status: trio.TaskStatus[Bridge] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled; reports `self` once the listener accepts connections. The
        store is started first (PostgreSQL: connected and migrated) and closed at the end.

        Raises:
            StartupError: the store cannot be started (`database_url`), a listener
                cannot bind, or (embedded) `ftwbridge db import` is reading `state_dir`
                (`store.inuse`).
        """
        try:
            with contextlib.ExitStack() as held:
                if self.config.database_url is None:  # the embedded bridge marks its state
                    held.enter_context(one_bridge(Path(self.config.state_dir)))
                    held.enter_context(serving_state(Path(self.config.state_dir)))
                try:
                    for name in await self.store.start():
                        log.info("database migration applied: %s", name)
                except StoreError as exc:
                    raise StartupError(str(exc), setting="database_url") from None
                if self.config.database_url is None:
                    self.state_watch = StateWatch(Path(self.config.state_dir))
                    self.checks.state_watch = self.state_watch
                    self.metrics.watch_state_disk(self.state_watch.free_bytes)
                await self._serve(task_status)
        finally:
            self.store.close()
            if isinstance(self.keys, RemoteKeys):  # its pooled connections
                with trio.CancelScope(shield=True):
                    await self.keys.aclose()

    def _main(self, fd: int) -> tuple[McpService, Any, edge.EdgeConfig]:
        """The main listener's parts once bound (`fd`, the socket hypercorn will own): `/mcp`'s
        service, the HTTP app over it and the rooms, and the listener's settings."""
        c = self.config
        service = mcp_service(
            c,
            pool=self.pool,
            tokens=self.tokens,
            site=self.site,
            clock=self.clock,
            metrics=self.metrics,
            roster_behind=self.door.rosters.roster_behind,
            mesh=None if self.node is None else self.node.forwarder,
            listens=self.listens,
            holder=None
            if self.node is None
            else holder_here(self.node.instance_id, self.door.online),
        )
        app = create_app(
            oauth=self.oauth,
            site=self.site,
            service=service,
            max_body_bytes=c.max_body_bytes,
            body_timeout_s=c.body_timeout_s,
        )
        hc = main_listener(
            c,
            fd,
            on_fault=self.metrics.on_connection_fault,
            connections=self.metrics.listener("main"),
            exempt=self.site.trusted_proxies,
        )
        return service, app, hc

    async def _serve_door(self, sock: socket.socket) -> None:
        """The door's own listener on `sock` until cancelled (`door.listener`)."""
        listener = door_part(self.config, self.door, self.site, self.metrics)
        assert self._nursery is not None
        self.door_url = await self._nursery.start(serve_door_listener, listener, sock)

    async def _serve(self, task_status: trio.TaskStatus[Bridge]) -> None:
        c = self.config
        warning = c.url_warning()
        if warning is not None:
            log.warning("%s", warning)
        consents, codes, claims = await self.oauth.restore()
        if consents or codes or claims:
            log.info("restored %d sign-ins, %d codes, %d claim offers", consents, codes, claims)
        sock = bind(c.bind, "main", "bind", c.listen_backlog)
        host, port = sock.getsockname()[:2]
        fd = sock.detach()  # hypercorn owns the listening socket from here on
        self.site.listen_at(host, port, self.config)
        if c.database_url is not None:
            self.node = cluster_node(c, self.store, self.door, self.clock, port, fd)
            if self.node.relay is not None:  # agent.request reaches the holder of the home
                self.oauth.send_to_box = self.node.relay.send
        service, app, hc = self._main(fd)
        bound = bind_admin(c, fd)
        admin_fd, self.admin_url = (None, None) if bound is None else bound
        door_sock = bind_door(c, fd, admin_fd)
        self.site.door_port = door_sock.getsockname()[1]  # the main port's refusal names it
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.pool.run)
            await nursery.start(self.door.apply_rosters)
            await nursery.start(self.door.watch_home_keys)  # `home enroll` beside it
            if c.database_url is not None:  # other instances' revocations and enrolments
                from ftwbridge.store.events import Events
                from ftwbridge.store.postgres import PgStore

                assert isinstance(self.store, PgStore)
                await nursery.start(Events(self.store).serve, self._on_event, self._on_gap)
            if self.node is not None:
                await nursery.start(self.node.serve, service, self.metrics)
            await nursery.start(self._serve_http, app, hc)
            await self._serve_door(door_sock)
            if admin_fd is not None:
                ac = admin_listener(
                    c,
                    admin_fd,
                    on_fault=self.metrics.on_connection_fault,
                    connections=self.metrics.listener("admin"),
                )
                status = Status(self.metrics.registry)
                await nursery.start(status.run)
                admin = create_admin_app(self.metrics, self.checks.verdict, status)
                await nursery.start(edge.serve, admin, ac)
            log.info("bridge up at %s", self.site.public_url)
            verdict = await self.checks.verdict()
            if verdict.why is not None:  # serving anyway: the part may come up later
                log.warning("%s; calls that need it are refused until it does", verdict.text())
            task_status.started(self)
