"""One instance's part in a cluster (docs/operations.md, "Many instances"), wired by `run.Bridge`: its
place in the directory, its claims kept with the door's uplinks, and, when `internal_bind` is
set, the forwarder, the relay of `agent.request` to a home's holder, and the internal listener
(forwarded `/mcp` calls and relayed door messages).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator

import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ftwbridge.config import CALL_SLACK_S, Config
from ftwbridge.config_rules import mesh_key_bytes
from ftwbridge.door import Door
from ftwbridge.mcp.server import McpService
from ftwbridge.metrics import Metrics
from ftwbridge.store.events import Event
from ftwbridge.store.known import KnownHolders
from ftwbridge.store.pg_directory import PgDirectory
from ftwbridge.store.postgres import PgStore

from .calls import ForwardedCalls
from .channel import HopClient
from .forward import PATH, Forwarder
from .holdings import Holdings
from .listener import InternalListener, InternalSettings, serve_internal
from .relay import RELAY_PATH, BoxRelay, RelayedMessages
from .signing import Checker
from .tls import client_context, server_of

log = logging.getLogger("ftwbridge.mesh")


class Node:
    """This instance among the others on one database.

    Args:
        config: the bridge's settings (`instance_id`, `internal_*`, `mesh_key`).
        store: the started PostgreSQL store.
        door: this instance's door (whose `events.uplink_up`/`uplink_down` reach `holdings`).
        wall_ms: the wall clock, ms since the Unix epoch.
        port: the main listener's bound port (the default instance id names it).
        internal: the internal listener's bound socket's fd and URL, or None when
            `internal_bind` is unset (no forwarding).
    """

    def __init__(
        self,
        *,
        config: Config,
        store: PgStore,
        door: Door,
        wall_ms: Callable[[], int],
        port: int,
        internal: tuple[int, str] | None,
    ) -> None:
        self._config = config
        self._wall_ms = wall_ms
        self._internal = internal
        self.directory = PgDirectory(
            store,
            instance_id=config.instance_name(port),
            url="" if internal is None else internal[1],
            wall_ms=wall_ms,
        )
        self.known = KnownHolders(self.directory.holder, instance_id=self.directory.instance_id)
        """Every home's holder in memory: what forwards and relays look up (no query a call)."""
        self.directory.on_present = self.known.present
        self._door = door
        self.holdings = Holdings(self.directory, door)
        verify = None if config.mesh_cafile is None else client_context(config.mesh_cafile)
        self._hop = HopClient(idle_s=config.keep_alive_s / 2, tls=verify)  # calls and relays
        self.forwarder: Forwarder | None = None
        self.relay: BoxRelay | None = None
        """Sends `agent.request` to a home's box wherever its uplink is (with forwarding)."""
        if internal is not None and config.mesh_key is not None:
            self.relay = BoxRelay(
                directory=self.known,
                here=door.online,
                send_here=door.send_to_box,
                hop=self._hop,
                key=mesh_key_bytes(config.mesh_key),
                wall_ms=wall_ms,
                deadline_s=config.call_deadline_s + CALL_SLACK_S,
                require_tls=verify is not None,
            )
            self.forwarder = Forwarder(
                directory=self.known,
                holds=self.holdings.holds,
                here=door.online,
                hop=self._hop,
                key=mesh_key_bytes(config.mesh_key),
                wall_ms=wall_ms,
                http_burst=config.http_burst,
                http_per_s=config.http_per_s,
                require_tls=verify is not None,
            )

    @classmethod
    def bound(
        cls,
        *,
        config: Config,
        store: PgStore,
        door: Door,
        wall_ms: Callable[[], int],
        port: int,
        bind: Callable[[str], socket.socket],
    ) -> Node:
        """A `Node` whose internal listener, when `internal_bind` is set, is bound now with
        `bind(address)` (which raises `StartupError` in words); its URL is `internal_url`, or
        one made from the address bound."""
        internal = None
        if config.internal_bind is not None:
            sock = bind(config.internal_bind)
            url = config.internal_site_url or ""
            if url.endswith(":0"):
                url = url[:-2] + f":{sock.getsockname()[1]}"
            internal = (sock.detach(), url)
        return cls(
            config=config, store=store, door=door, wall_ms=wall_ms, port=port, internal=internal
        )

    @property
    def instance_id(self) -> str:
        """This instance's id."""
        return self.directory.instance_id

    async def hear(self, event: Event) -> None:
        """An event of the database: a `takeover` names the home's holder to `known`, and
        one of a home held here closes its uplink (4409) at once; a `roster` of a home held
        elsewhere drops the one the door keeps in memory (the entry's token check reads the
        newest from the store)."""
        self.known.hear(event)
        home = self.directory.hear(event)
        if home is not None:
            await self.holdings.lost(home)
        if event.kind == "roster":
            self._door.forget_roster(event.home)

    def gap(self) -> None:
        """Events were lost: drop every roster held in memory for homes held elsewhere, and
        every holder known in memory (each is looked up again once)."""
        self.known.gap()
        self._door.forget_roster()

    async def serve(
        self,
        service: McpService,
        metrics: Metrics,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: keep this instance present in the directory and, with forwarding,
        serve the internal listener (`mesh/listener.py`). Reports started once both are up.

        Raises:
            StoreError: (before started) the database does not answer, or another running
                instance has this `instance_id`.
        """
        known = _KnownMetrics(self.known)
        metrics.registry.register(known)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.directory.serve, self.holdings.lost)
                if self._internal is not None and self._config.mesh_key is not None:
                    fd, url = self._internal
                    listener = self._listener(service, metrics, self._config.mesh_key)
                    sock = socket.socket(fileno=fd)
                    await nursery.start(serve_internal, listener, sock)
                    log.info("instance %s: internal listener at %s", self.instance_id, url)
                task_status.started()
        finally:
            metrics.registry.unregister(known)
            with trio.CancelScope(shield=True):
                await self._hop.aclose()

    def _listener(self, service: McpService, metrics: Metrics, mesh_key: str) -> InternalListener:
        """The internal listener: forwarded `/mcp` (listen streams included) and the relayed
        door messages, with the main listener's body bounds, TLS when `internal_certfile`
        and `internal_keyfile` are set."""
        c = self._config
        checker = Checker(mesh_key_bytes(mesh_key), self.instance_id)
        calls = ForwardedCalls(
            service=service,
            checker=checker,
            wall_ms=self._wall_ms,
            on_refused=metrics.on_mesh_refused,
        )
        relayed = RelayedMessages(
            checker=checker,
            holds=self.holdings.holds,
            send_here=self._door.send_to_box,
            wall_ms=self._wall_ms,
            on_refused=metrics.on_mesh_refused,
        )
        settings = InternalSettings(
            max_body_bytes=c.max_body_bytes,
            body_s=c.body_timeout_s,
            idle_s=c.keep_alive_s,
            write_s=c.listen_stuck_s,
        )
        return InternalListener(
            {PATH: calls, RELAY_PATH: relayed},
            settings,
            tls=server_of(c.internal_certfile, c.internal_keyfile),
            on_fault=metrics.on_connection_fault,
            connections=metrics.listener("internal"),
        )


class _KnownMetrics(Collector):
    """`ftwbridge_mesh_holder_lookups_total` (the database lookups of a home's holder: the
    in-memory directory's misses, none a call in steady state) and `ftwbridge_mesh_holders_known`
    (homes whose holder is known in memory)."""

    def __init__(self, known: KnownHolders) -> None:
        self._known = known

    def collect(self) -> Iterator[Metric]:
        stats = self._known.statistics()
        yield CounterMetricFamily(
            "ftwbridge_mesh_holder_lookups",
            "Database lookups of a home's holder (misses of the holders known in memory).",
            value=stats["lookups"],
        )
        yield GaugeMetricFamily(
            "ftwbridge_mesh_holders_known",
            "Homes whose holder this instance knows in memory.",
            value=stats["homes"],
        )
