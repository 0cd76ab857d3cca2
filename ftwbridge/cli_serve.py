"""The long-running commands: `ftwbridge serve` (the bridge) and `ftwbridge keys` (the keys
part as its own process, on a Unix socket or on TCP), each until signalled
(docs/operations.md, "Signals" and "Child processes")."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import trio

from ftwbridge.config import Config, kek_bytes, mesh_key_bytes, split_address
from ftwbridge.keys import KeysPort, KeysService, serve_keys
from ftwbridge.keys.remote import url_of
from ftwbridge.lifecycle import StartupError, settle_heap, until_signalled, until_stdin_closes
from ftwbridge.store import BridgeStore


async def serve(config: Config, *, exit_with_parent: bool = False) -> int:
    """`ftwbridge serve`. With `exit_with_parent`, standard input reaching end-of-file drains
    and stops the bridge as SIGTERM does, so a parent that dies (SIGKILL included) takes it
    along (docs/operations.md, "Child processes")."""
    from ftwbridge.run import Bridge  # the HTTP stack loads only for commands that serve

    bridge = Bridge(config)

    async def run(nursery: trio.Nursery) -> None:
        await nursery.start(bridge.serve)
        settle_heap()
        print(f"ftwbridge serving {bridge.site.resource}", flush=True)
        if bridge.admin_url is not None:
            print(f"admin on {bridge.admin_url}", flush=True)
        if not exit_with_parent:
            await trio.sleep_forever()
        await until_stdin_closes()
        await bridge.drain()

    return await until_signalled(run, drain=bridge.drain)


def _listen_key(config: Config, listen: str | None) -> bytes | None:
    """The cluster's mesh key, checked against `--listen`: TCP needs it and a host:port.

    Raises:
        StartupError: `--listen` without `mesh_key`, or not host:port.
    """
    mesh_key = mesh_key_bytes(config.mesh_key) if config.mesh_key is not None else None
    if listen is not None:
        if mesh_key is None:
            raise StartupError(
                "keys --listen serves bridge instances over TCP, which prove the cluster's"
                " mesh_key, and mesh_key is not set",
                setting="mesh_key",
            )
        try:
            split_address(listen)
        except ValueError as exc:
            raise StartupError(f"--listen {exc}") from None
    return mesh_key


async def _key_service(config: Config) -> tuple[KeysPort, BridgeStore | None]:
    """The keys part and the store it keeps sealed keys in (None: the key file).

    Raises:
        StartupError: `database_url` without `kek`.
    """
    if config.kek is not None:
        from ftwbridge import admin  # the one-shot commands' module: loaded when used

        store = await admin.started_store(config)
        try:
            return await admin.sealed_keys_service(store, kek_bytes(config.kek)), store
        except BaseException:
            store.close()
            raise
    if config.database_url is not None:
        raise StartupError(
            "a keys service on database_url keeps agents' keys in the database, sealed"
            " under kek, and kek is not set (`openssl rand -hex 32` makes one; give every"
            " keys service the same)",
            setting="kek",
        )
    return KeysService(Path(config.state_dir) / "agent-keys.json"), None


async def keys(config: Config, socket: Path | None, listen: str | None) -> int:
    """`ftwbridge keys`: serve the keys part on the Unix `socket`, or on TCP at `listen` to
    bridge instances that prove `mesh_key`, until signalled. With `kek` the agents' keys are
    kept sealed in the store (PostgreSQL with `database_url`, else SQLite in `state_dir`),
    else in the key file in `state_dir`. A socket another keys part serves, or an address
    that cannot be bound, is refused in one sentence with status 2."""
    from ftwbridge.keys.listen import KeysListenError, serve_keys_tcp
    from ftwbridge.keys.wire import KeysSocketError
    from ftwbridge.mesh.tls import server_of

    mesh_key = _listen_key(config, listen)
    service, store = await _key_service(config)
    refused: list[Exception] = []

    async def run(nursery: trio.Nursery) -> None:
        try:
            if listen is not None and mesh_key is not None:
                tls = server_of(config.internal_certfile, config.internal_keyfile)
                host, port = await nursery.start(
                    functools.partial(serve_keys_tcp, tls=tls), listen, service, mesh_key
                )
                print(f"keys service on {url_of((host, port))}", flush=True)
            elif socket is not None:
                await nursery.start(serve_keys, socket, service)
                print(f"keys part on {socket}", flush=True)
        except (KeysSocketError, KeysListenError) as exc:  # raised before it serves
            refused.append(exc)
            return
        settle_heap()
        await trio.sleep_forever()

    try:
        status = await until_signalled(run)
    finally:
        if store is not None:
            store.close()
    if refused:
        print(f"ftwbridge: {refused[0]}", file=sys.stderr)
        return 2
    return status
