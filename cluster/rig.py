"""`open_cluster`: the whole cluster as one async context, every process in nested nurseries.

Layers, outermost first: PostgreSQL; the keys services; the bridge instances and HAProxy; the
stub homes. Leaving the context stops the innermost layer first and each layer only after the
one inside it is gone, so instances drain while PostgreSQL still answers; a cancellation
stops every layer at once, each process still SIGTERMed, then SIGKILLed after a bound.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from ftwbridge.store.events import Event, Events
from ftwbridge.store.pg_directory import RENEW_S, PgDirectory
from ftwbridge.store.postgres import PgStore

from .ca import ClusterCA
from .homes import Home, start_homes, wall_ms
from .procs import PY, CannotStart, Child, child_env, free_port, pin, reserved_port
from .services import (
    KEYS_SERVICES,
    Instance,
    Postgres,
    haproxy_command,
    start_haproxy,
    start_keys,
    write_haproxy,
)


@dataclass
class Options:
    """What `open_cluster` starts: HAProxy's `port` (0: a free one), how many `instances`
    and stub `homes`, and `settings` added to every instance's configuration. For the bench:
    `cpus` pins an instance (by id) or the stub homes (`"homes"`) to one CPU (`taskset`), and
    `boxes_at` has every box dial that instance's door instead of HAProxy; `stub_args` go to
    every stub home (`--no-read-limit` for load); `affinity` is how HAProxy picks an
    instance for a call (`cluster.affinity.MODES`)."""

    port: int = 8790
    instances: int = 3
    homes: int = 3
    settings: dict[str, Any] = field(default_factory=dict)
    cpus: dict[str, int] = field(default_factory=dict)
    boxes_at: str | None = None
    stub_args: tuple[str, ...] = ()
    affinity: str = "learned"


@dataclass
class Cluster:
    """A running cluster (see `open_cluster`). `url` is `/mcp` through HAProxy."""

    root: Path
    port: int
    postgres: Postgres
    instances: list[Instance]
    keys: list[Child]
    haproxy: Child
    store: PgStore
    options: Options = field(default_factory=Options)
    migrated: list[str] = field(default_factory=list)
    """What `ftwbridge db migrate` printed at the start."""
    homes: list[Home] = field(default_factory=list)
    nurseries: dict[str, trio.Nursery] = field(default_factory=dict)
    changed: dict[str, trio.Event] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    @property
    def door_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/box"

    def instance(self, name: str) -> Instance:
        """The instance with id `name`.

        Raises:
            KeyError: there is none.
        """
        for made in self.instances:
            if made.name == name:
                return made
        raise KeyError(name)

    async def holder(self, home: str) -> str | None:
        """The id of the instance that holds `home`'s uplink now, per the directory (None:
        no live instance does).

        Raises:
            StoreError: PostgreSQL does not answer.
        """
        lookup = PgDirectory(self.store, instance_id="cluster", url="", wall_ms=wall_ms)
        found = await lookup.holder(home)
        return None if found is None else found.instance

    async def restart_instance(self, name: str) -> None:
        """Start instance `name` again (after it stopped or was killed).

        Raises:
            CannotStart: it did not serve within `procs.WAIT_S`.
        """
        await self.instance(name).start(self.nurseries["instances"])

    async def set_instance_state(self, name: str, state: str) -> None:
        """Put instance `name` in HAProxy's `state` (`maint`: no new calls nor boxes there;
        `ready`: back in both backends), through HAProxy's runtime API.

        Raises:
            RuntimeError: HAProxy refused the command (its answer).
        """
        for backend in ("bridges", "boxes"):
            said = await haproxy_command(self.root, f"set server {backend}/{name} state {state}")
            if said:
                raise RuntimeError(f"HAProxy answered: {said}")

    async def restart_postgres(self) -> None:
        """Stop PostgreSQL (fast shutdown) and start it again on the same port and data.

        Raises:
            CannotStart: it did not come back within `procs.WAIT_S`.
        """
        await self.postgres.stop()
        await self.postgres.start(self.nurseries["postgres"])

    async def on_event(self, event: Event) -> None:
        """Wake those waiting on the home of a `roster`, `takeover` or `claim` event."""
        if event.kind in ("roster", "takeover", "claim"):
            self.changed.pop(event.home, trio.Event()).set()

    async def on_gap(self) -> None:
        """Events were lost: wake every waiter to look again."""
        for changed in self.changed.values():
            changed.set()
        self.changed.clear()

    async def wait_holder(self, home: str, accept: Callable[[str | None], bool]) -> str | None:
        """Return the holder of `home` (as `holder`) once `accept` takes it, looking again at
        each `takeover` event of the home (the caller bounds the time).

        Raises:
            StoreError: PostgreSQL does not answer.
        """
        while True:
            changed = self.changed.setdefault(home, trio.Event())  # before the look
            found = await self.holder(home)
            if accept(found):
                return found
            with trio.move_on_after(RENEW_S):  # a lease that runs out sends no event
                await changed.wait()

    async def wait_offer(self, home: str, digest: bytes) -> None:
        """Return once the claim offer with code hash `digest` of `home` is in the database,
        looking again at each `claim` event of the home (the caller bounds the time)."""
        while True:
            changed = self.changed.setdefault(home, trio.Event())  # before the look
            if await self.store.oauth_state("claim", digest.hex(), wall_ms()) is not None:
                return
            await changed.wait()


def instance_settings(
    root: Path,
    name: str,
    ports: tuple[int, int, int],
    public: str,
    database_url: str,
    shared: dict[str, Any],
) -> dict[str, Any]:
    """The settings of instance `name` (ports: main, admin, internal); with a cluster CA in
    `shared["ca"]`, its internal listener serves TLS with a certificate of that CA and it
    forwards only over TLS."""
    port, admin, internal = ports
    settings: dict[str, Any] = {
        "bind": f"127.0.0.1:{port}",
        "public_url": public,
        "admin_bind": f"127.0.0.1:{admin}",
        "door_bind": f"127.0.0.1:{free_port()}",  # HAProxy's `boxes` backend
        "state_dir": str(root / name),
        "database_url": database_url,
        "drain_s": 3,
        # the scripted session's 28 calls at one home and ~30 requests of one agent, as the demo
        "pace_calls_burst": 40,
        "http_burst": 60,
        # HAProxy in front names the client in X-Forwarded-For: the limits key on that
        "trusted_proxies": ["127.0.0.1"],
    }
    ca: ClusterCA | None = shared.get("ca")
    settings |= {
        "instance_id": name,
        "internal_bind": f"127.0.0.1:{internal}",
        "internal_url": f"{'https' if ca else 'http'}://127.0.0.1:{internal}",
        "mesh_key": shared["mesh_key"],
    }
    if ca is not None:
        settings |= ca.settings(name)
    reach: dict[str, Any] = shared.get("reach", {})
    extra: dict[str, Any] = shared.get("extra", {})
    return settings | reach | extra


async def _migrate(root: Path, database_url: str) -> list[str]:
    """`ftwbridge db migrate` on the cluster's database; returns what it printed."""
    path = root / "migrate.toml"
    path.write_text(f'database_url = "{database_url}"\nstate_dir = "{root / "migrate"}"\n')
    done = await trio.run_process(
        [PY, "-m", "ftwbridge", "db", "migrate", "--config", str(path)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=child_env(),
    )
    if done.returncode != 0:
        raise CannotStart(done.stderr.decode(errors="replace").strip() or "db migrate failed")
    return done.stdout.decode().splitlines()


@contextmanager
def _run_folder() -> Iterator[Path]:
    """A new folder for one run, removed at its end; after a failure only PostgreSQL's data
    goes, and the logs and configurations stay for the sentence that names them."""
    root = Path(tempfile.mkdtemp(prefix="ftwbridge-cluster-"))
    try:
        yield root
    except BaseException:
        shutil.rmtree(root / "pg", ignore_errors=True)
        raise
    shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def open_cluster(options: Options) -> AsyncIterator[Cluster]:
    """Start the cluster of `options` in a temporary folder, every home granted one agent
    with a token; yields it, then stops it layer by layer (module docstring) and removes the
    folder (after a failure, all but PostgreSQL's data stays: logs and configurations).

    Raises:
        CannotStart: a part could not start (its one sentence), e.g. the port in use or
            PostgreSQL or HAProxy missing.
    """
    port = options.port or free_port()
    # HAProxy binds its port only once PostgreSQL, the keys services and the instances run:
    # held meanwhile, so that no other program's socket takes it (a test beside this one, an
    # outgoing connection), which HAProxy could then not bind while the run went on with it
    with reserved_port(port, "HAProxy"), _run_folder() as root:
        postgres = await Postgres.init(root, free_port())
        async with trio.open_nursery() as pg_n:
            await postgres.start(pg_n)
            migrated = await _migrate(root, postgres.url)
            shared: dict[str, Any] = {
                "mesh_key": secrets.token_hex(32),
                "kek": secrets.token_hex(32),
                "keys_ports": [free_port() for _ in range(KEYS_SERVICES)],
                "extra": options.settings,
                "ca": ClusterCA(root / "tls"),  # the internal hop over TLS
            }
            async with trio.open_nursery() as keys_n:
                keys, shared["reach"] = await start_keys(keys_n, root, postgres.url, shared)
                instances = [
                    Instance(
                        name,
                        root,
                        *(ports := (free_port(), free_port(), free_port())),
                        settings=instance_settings(
                            root, name, ports, f"http://127.0.0.1:{port}", postgres.url, shared
                        ),
                        prefix=pin(options.cpus.get(name)),
                    )
                    for name in (f"b{i + 1}" for i in range(options.instances))
                ]
                async with trio.open_nursery() as inst_n:
                    async with trio.open_nursery() as starting:
                        for made in instances:
                            made.write_config()
                            starting.start_soon(made.start, inst_n)
                    cfg = write_haproxy(root, port, instances, affinity=options.affinity)
                    haproxy = await start_haproxy(inst_n, root, port, cfg)
                    store = PgStore(postgres.url)
                    await store.start()
                    try:
                        cluster = Cluster(root, port, postgres, instances, keys, haproxy, store)
                        cluster.options = options
                        cluster.migrated = migrated
                        cluster.nurseries = {"postgres": pg_n, "keys": keys_n, "instances": inst_n}
                        async with trio.open_nursery() as homes_n:
                            await homes_n.start(
                                Events(store).serve, cluster.on_event, cluster.on_gap
                            )
                            cluster.nurseries["homes"] = homes_n
                            await start_homes(cluster, homes_n, options.homes)
                            yield cluster
                            homes_n.cancel_scope.cancel()
                    finally:
                        store.close()
                    inst_n.cancel_scope.cancel()
                keys_n.cancel_scope.cancel()
            pg_n.cancel_scope.cancel()
