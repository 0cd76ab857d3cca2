"""What a bridge needs before it serves: its listening sockets (`bind`), its keys part
(`keys_part`), the mark that its state folder is in use (`serving_state`), and the settings
of its HTTP listeners (`main_listener`, `admin_listener`). `ftwbridge.run.Bridge` uses them."""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from ftwbridge.config import Config, keys_addresses, mesh_key_bytes, split_address
from ftwbridge.door import Door
from ftwbridge.door.listener import DoorListener, DoorListenerSettings
from ftwbridge.edgerules import Connections, EdgeConfig
from ftwbridge.fairshare import Network
from ftwbridge.keys import KeysClient, KeysPort, KeysService
from ftwbridge.keys.remote import RemoteKeys
from ftwbridge.lifecycle import StartupError
from ftwbridge.mesh.tls import client_of
from ftwbridge.proto.door import MAX_MESSAGE_BYTES
from ftwbridge.store.inuse import StateInUse
from ftwbridge.store.inuse import serving_state as _state_in_use


def bind(address: str, listener: str, setting: str, backlog: int = 1024) -> socket.socket:
    """A listening TCP socket on `address` (host:port, `config.split_address`) whose queue of
    connections not yet accepted holds `backlog` (`listen_backlog`; the kernel caps it at
    `net.core.somaxconn`).

    Raises:
        StartupError: the address cannot be bound (in use, not this machine's, not allowed);
            the sentence names `listener` (main or admin) and its `setting`.
    """
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        why = {
            errno.EADDRINUSE: "the port is in use (another bridge, or another program?)",
            errno.EADDRNOTAVAIL: "that address is not one of this machine's",
            errno.EACCES: "this user may not bind that port",
        }.get(exc.errno or 0, exc.strerror or str(exc))
        raise StartupError(
            f"the {listener} listener cannot bind {address}: {why}", setting=setting
        ) from None
    sock.set_inheritable(True)
    return sock


def bind_admin(config: Config, main_fd: int) -> tuple[int, str] | None:
    """The admin listener's bound socket (`admin_bind`) and its URL, or None when it is not
    set.

    Raises:
        StartupError: it cannot bind; the main listener's socket `main_fd` is closed.
    """
    if config.admin_bind is None:
        return None
    try:
        sock = bind(config.admin_bind, "admin", "admin_bind", config.listen_backlog)
    except StartupError:
        socket.close(main_fd)  # the main listener's socket, not yet hypercorn's
        raise
    host, port = sock.getsockname()[:2]
    return sock.detach(), f"http://{host}:{port}"


def keys_part(config: Config) -> KeysPort:
    """The keys part a bridge uses: keys services over TCP (`keys_url`, proving `mesh_key`),
    a keys process on a Unix socket (`keys_socket`), or in this process on the key file in
    `state_dir`. A bridge never holds the `kek`, which seals the agents' keys: only keys
    services do.

    Raises:
        StartupError: `kek` is set in the bridge's configuration.
    """
    if config.kek is not None:
        raise StartupError(
            "kek is set, but only keys services (`ftwbridge keys`) may hold it, never a bridge;"
            " remove it from this bridge's configuration file and environment (FTWBRIDGE_KEK)"
        )
    if config.keys_url is not None and config.mesh_key is not None:
        addresses = keys_addresses(config.keys_url)
        tls = client_of(config.mesh_cafile)  # the keys channel over TLS too, when it is set
        return RemoteKeys(addresses, mesh_key_bytes(config.mesh_key), tls=tls)
    if config.keys_socket is not None:
        return KeysClient(config.keys_socket)
    return KeysService(Path(config.state_dir) / "agent-keys.json")


@contextlib.contextmanager
def serving_state(state_dir: Path) -> Iterator[None]:
    """`store.inuse.serving_state`, its refusal a `StartupError`.

    Raises:
        StartupError: an import holds `state_dir`, or its lock file cannot be made.
    """
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(_state_in_use(state_dir))
        except StateInUse as exc:
            raise StartupError(str(exc)) from None
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise StartupError(
                f"the state folder {state_dir} cannot be marked in use: {why}",
                setting="state_dir",
            ) from None
        yield


def main_listener(
    c: Config,
    fd: int,
    *,
    on_fault: Callable[[str], None],
    connections: Connections,
    exempt: tuple[Network, ...],
) -> EdgeConfig:
    """The main listener's settings on the bound socket `fd`: `/mcp` and OAuth, a silent
    connection closed after `door_silence_s`, listen streams (`listen_stuck_s`), idle
    connections (`keep_alive_s`). It speaks no WebSocket (`app.create_app`)."""
    hc = EdgeConfig()
    hc.on_connection_fault = on_fault
    hc.connections = connections
    hc.exempt = exempt  # trusted proxies: they bound their own clients' idle connections
    hc.bind = [f"fd://{fd}"]
    hc.read_timeout = int(c.door_silence_s)
    hc.stream_write_s = c.listen_stuck_s  # a listen stream's rule (docs/live.md)
    hc.keep_alive_timeout = c.keep_alive_s  # idle.IdleTimer closes an idle connection then
    hc.accesslog = None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.graceful_timeout = 1.0
    hc.backlog = c.listen_backlog
    return hc


def admin_listener(
    c: Config, fd: int, *, on_fault: Callable[[str], None], connections: Connections
) -> EdgeConfig:
    """The admin listener's settings on the bound socket `fd` (`/metrics`, health); an idle
    connection is closed after `keep_alive_s`, as on the main listener."""
    ac = EdgeConfig()
    ac.on_connection_fault = on_fault
    ac.connections = connections
    ac.bind = [f"fd://{fd}"]
    ac.keep_alive_timeout = c.keep_alive_s
    ac.accesslog = None
    ac.errorlog = logging.getLogger("hypercorn.error")
    ac.graceful_timeout = 1.0
    ac.backlog = c.listen_backlog  # hypercorn listens again with it (its own: 100)
    return ac


def bind_door(c: Config, *fds: int | None) -> socket.socket:
    """The door's own listening socket (`door_bind`).

    Raises:
        StartupError: it cannot bind; the other listeners' sockets `fds` are closed first.
    """
    try:
        return bind(c.door_bind, "door", "door_bind", c.listen_backlog)
    except StartupError:
        for fd in fds:
            if fd is not None:
                socket.close(fd)
        raise


def door_listener(
    c: Config,
    door: Door,
    *,
    on_fault: Callable[[str], None],
    exempt: tuple[Network, ...],
    source: Callable[[str, list[str]], str],
    connections: Connections,
) -> DoorListener:
    """The door's own listener (`door_bind`): the door's uplinks with their handshake time
    (`door_handshake_s`), pings (`door_ping_s`), silence (`door_silence_s`) and largest message."""
    settings = DoorListenerSettings(
        handshake_s=c.door_handshake_s,
        silence_s=c.door_silence_s,
        ping_s=c.door_ping_s,
        max_message=MAX_MESSAGE_BYTES,
        exempt=exempt,
        source=source,
    )
    return DoorListener(door.serve_uplink, settings, on_fault, connections)
