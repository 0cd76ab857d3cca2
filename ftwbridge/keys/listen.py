"""The keys service on TCP (`ftwbridge keys --listen HOST:PORT`): a thin trio shell around
`MeshChannel` (keys/mesh.py) and the requests of keys/ops.py; docs/architecture.md, "What runs where".

Each connection is its own task and its own fault: a peer that sends garbage, a frame over
the cap, a wrong proof, or nothing within the handshake deadline is told why in one REFUSED
sentence and closed, and the service logs one line naming the peer's address; every other
connection goes on. Requests on a connection are served one after the other, each bounded by
`REQUEST_S`; a connection idle for `IDLE_S` is closed (the bridge opens another when it needs
one).
"""

from __future__ import annotations

import logging
import ssl
from typing import Final

import trio

from ftwbridge.config import split_address
from ftwbridge.fairshare import SlotRefused, Slots, source_key
from ftwbridge.listening import PatientListener

from .mesh import MeshChannel, Message, Refused
from .ops import answer
from .service import KeysPort

log = logging.getLogger("ftwbridge.keys")

HANDSHAKE_S: Final = 5.0
"""The longest a new connection may take to prove the mesh key, seconds."""
IDLE_S: Final = 300.0
"""A connection with no request for this long is closed, seconds."""
REQUEST_S: Final = 10.0
"""The longest one request may take to serve (the store included), seconds."""
FLUSH_S: Final = 1.0
"""The longest a refusal sentence may take to be written before the connection closes, s."""
MAX_CONNECTIONS: Final = 1024
"""Connections that proved the mesh key served at once; one more is refused in words and
closed. Each bridge opens at most `remote.MAX_CONNECTIONS` to a keys service, so this serves 32
instances at their busiest. Connections still in their handshake do not count here."""
MAX_STRANGERS: Final = 256
"""Connections that have not proved the mesh key yet, all peers together; past it the peer
address holding the most loses its oldest (`fairshare.FairShare`)."""
STRANGERS_PER_SOURCE: Final = 64
"""Connections one peer address may hold before they prove the mesh key (a bridge opens at
most `remote.MAX_CONNECTIONS`, 32, at once)."""
TOO_MANY: Final = "the keys service has too many connections; try again shortly"
STRANGERS_SHED: Final = (
    "the keys service has too many connections that have not proved the mesh key, and this"
    " address held the most; try again shortly"
)
STRANGERS_FULL: Final = (
    "too many connections from this address have not proved the mesh key yet; try again shortly"
)
RECEIVE_BYTES: Final = 65536
LOG_REFUSALS: Final = 10
"""Refused connections logged a minute, one line each; the rest are counted, and the first
line of a later minute says how many were held back (a flood cannot fill the disk)."""


class RefusalLog:
    """Warning lines about refused peers, at most `LOG_REFUSALS` in any minute from the first
    of them; `now` is monotonic seconds (trio's clock)."""

    def __init__(self) -> None:
        self._since = -60.0
        self._said = 0
        self._held = 0

    def warn(self, now: float, message: str, *args: object) -> bool:
        """Log `message % args` unless this minute's lines are used up; whether it was."""
        if now - self._since >= 60.0:
            if self._held:
                log.warning("keys service: %d more refused connections were not logged", self._held)
            self._since, self._said, self._held = now, 0, 0
        if self._said >= LOG_REFUSALS:
            self._held += 1
            return False
        self._said += 1
        log.warning(message, *args)
        return True


class KeysListenError(Exception):
    """The keys service cannot listen where it was told; one sentence for the operator."""


async def serve_keys_tcp(
    address: str,
    service: KeysPort,
    mesh_key: bytes,
    *,
    tls: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `service` on TCP `address` (`host:port`, port 0 picks one) to peers that prove
    `mesh_key` (32 bytes), until cancelled, over TLS with `tls` when given (`mesh.tls`
    `server_of`; a peer whose TLS handshake fails ends its connection alone, within the
    handshake's `HANDSHAKE_S`). Reports (host, port) bound once listening.

    Raises:
        KeysListenError: before reporting started, when `address` cannot be bound (in use,
            not this machine's, not allowed).
    """
    host, port = split_address(address)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise KeysListenError(
            f"the keys service cannot listen on {address}: {exc.strerror or exc}; give"
            " --listen another address or port (port 0 picks a free one)"
        ) from None
    bound = listeners[0].socket.getsockname()
    limiter = trio.CapacityLimiter(MAX_CONNECTIONS)
    strangers = Slots(MAX_STRANGERS, STRANGERS_PER_SOURCE)
    refusals = RefusalLog()

    async def handler(stream: trio.abc.Stream) -> None:
        await serve_connection(
            stream, service, mesh_key, limiter=limiter, refusals=refusals, strangers=strangers
        )

    served: list[trio.abc.Listener[trio.abc.Stream]] = list(listeners)
    if tls is not None:
        served = [trio.SSLListener(listener, tls) for listener in listeners]
    # accept's EMFILE and its kin waited out in sentences, not trio's tracebacks
    served = [PatientListener(listener, f"the keys service on {address}") for listener in served]
    async with trio.open_nursery() as nursery:
        task_status.started((str(bound[0]), int(bound[1])))
        await trio.serve_listeners(handler, served, handler_nursery=nursery)


def _source(stream: trio.abc.Stream) -> str:
    """The peer's address without its port, the key of its stranger slots ("a peer" when
    unknown: such peers share one source)."""
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "a peer"
    try:
        host = str(stream.socket.getpeername()[0])
    except OSError:
        return "a peer"
    return source_key(host) or host


def _peer(stream: trio.abc.Stream) -> str:
    """The peer's `host:port` for the log, or "a peer" (a memory stream, a socket gone)."""
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    if not isinstance(stream, trio.SocketStream):
        return "a peer"
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "a peer"
    return f"{host}:{port}"


async def _flush(stream: trio.abc.Stream, channel: MeshChannel) -> None:
    data = channel.data_to_send()
    if data:
        await stream.send_all(data)


async def serve_connection(
    stream: trio.abc.Stream,
    service: KeysPort,
    mesh_key: bytes,
    *,
    limiter: trio.CapacityLimiter,
    refusals: RefusalLog | None = None,
    strangers: Slots | None = None,
) -> None:
    """One peer's connection, from its handshake to its end; closes `stream`. A peer that
    breaks the connection ends only it; nothing it sends raises out of here. Refusals are
    logged through `refusals` (a fresh `RefusalLog` when None).

    Until it has proved the mesh key, the connection holds a slot of `strangers` (a fresh
    `Slots(MAX_STRANGERS, STRANGERS_PER_SOURCE)` when None), keyed on the peer's address;
    only once proved does it take one of `limiter`'s (the authenticated connections), so
    strangers holding connections open never keep a bridge out (docs/operations.md, "Limits
    that strangers cannot fill").
    """
    refusals = RefusalLog() if refusals is None else refusals
    strangers = Slots(MAX_STRANGERS, STRANGERS_PER_SOURCE) if strangers is None else strangers
    peer = _peer(stream)
    channel = MeshChannel(mesh_key, client=False)
    async with stream:
        try:
            refused = await _prove(stream, channel, limiter, strangers, _source(stream))
            if refused is None and channel.is_open:
                try:
                    limiter.acquire_nowait()
                except trio.WouldBlock:
                    refused = channel.refuse(TOO_MANY)
                else:
                    try:
                        refused = await _converse(stream, channel, service)
                    finally:
                        limiter.release()
            if refused is not None:
                how = "refused" if refused.ours else "was refused by"
                refusals.warn(
                    trio.current_time(), "keys service %s %s: %s", how, peer, refused.sentence
                )
                with trio.move_on_after(FLUSH_S):
                    await _flush(stream, channel)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("keys connection from %s broke", peer)
        except Exception:  # a fault of ours in one request: it ends this connection alone
            log.exception("keys connection from %s ended by a fault; the service goes on", peer)


async def _prove(
    stream: trio.abc.Stream,
    channel: MeshChannel,
    limiter: trio.CapacityLimiter,
    strangers: Slots,
    source: str,
) -> Refused | None:
    """The handshake, in a stranger's slot: a refusal (queued on `channel`), or None when the
    channel is open or the peer hung up."""
    if limiter.available_tokens < 1:  # no room even once proved: say so at once
        return channel.refuse(TOO_MANY)
    try:
        with strangers.hold(source) as scope:
            with scope:
                return await _handshake(stream, channel)
            return channel.refuse(STRANGERS_SHED)
    except SlotRefused:
        return channel.refuse(STRANGERS_FULL)


async def _handshake(stream: trio.abc.Stream, channel: MeshChannel) -> Refused | None:
    """Run the handshake within `HANDSHAKE_S`: None once open (or the peer hung up), else the
    refusal (its REFUSED frame queued)."""
    with trio.move_on_after(HANDSHAKE_S):
        while not channel.is_open:
            data = await stream.receive_some(RECEIVE_BYTES)
            if not data:
                return None
            for event in channel.receive_data(data):
                if isinstance(event, Refused):
                    return event
            await _flush(stream, channel)
    if not channel.is_open:
        return channel.refuse(f"the handshake took longer than {HANDSHAKE_S:g} s")
    return None


async def _converse(
    stream: trio.abc.Stream, channel: MeshChannel, service: KeysPort
) -> Refused | None:
    """Serve requests on an open channel until the peer hangs up, stays idle `IDLE_S`, or a
    fault ends the channel (returned, its REFUSED frame queued)."""
    while True:
        with trio.move_on_after(IDLE_S) as idle:
            data = await stream.receive_some(RECEIVE_BYTES)
        if idle.cancelled_caught or not data:
            return None  # idle or hung up: close quietly
        for event in channel.receive_data(data):
            if isinstance(event, Refused):
                return event
            if isinstance(event, Message):
                reply: dict[str, object] = {"err": "the keys service took too long"}
                with trio.move_on_after(REQUEST_S):
                    reply = await answer(service, event.value)
                try:
                    channel.send_message(reply)
                except ValueError:  # an answer over the frame cap
                    channel.send_message({"err": "the answer is too large for a keys frame"})
        await _flush(stream, channel)
