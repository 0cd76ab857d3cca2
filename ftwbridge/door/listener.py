"""The door's own listener: `/v1/box` WebSockets on trio streams, with no HTTP server around them.

`serve_door_listener(serve, sock, settings)` accepts connections on a bound socket; each reads
one request head (h11, bounded by `handshake_s` and `MAX_HEAD_BYTES`), judges it by
`upgrade.classify_upgrade`, answers a refusal in words or the 101, and hands the box's
`wsock.LeanSocket` to `serve` (the door's `serve_uplink`) with a ping every `ping_s`. Whatever a
connection's bytes make happen ends that connection alone: its socket closed, its tasks
cancelled, one warning line and `on_fault(kind)` for a peer that broke the protocol. Until its
101 a connection holds a slot of the listener's strangers (`fairshare.Slots`, keyed on its TCP
peer: docs/operations.md, "Limits that strangers cannot fill"); one turned away is told 429 or
503 in words, without waiting (`listening.say_at_once`). docs/operations.md, "The door's own
listener", says how a proxy routes to it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import h11
import trio
from wsproto.connection import Connection, ConnectionType

from ftwbridge.edgerules import (
    LAST_WORDS_S,
    MAX_STRANGERS,
    STRANGERS_PER_SOURCE,
    TURNED_AWAY,
    Connections,
    State,
    turned_away_status,
)
from ftwbridge.fairshare import Network, SlotRefused, Slots, source_key
from ftwbridge.listening import PatientListener, http_refusal, peer_host, say_at_once

from .tunnel import close_ws
from .upgrade import Refusal, Upgrade, accept_response, classify_upgrade, refusal_head
from .wsock import RECV_BYTES, BoxGone, LeanSocket

log = logging.getLogger("ftwbridge.door")
MAX_HEAD_BYTES: Final = 16 * 1024
"""The largest request head taken (a box's is a few hundred bytes); past it: 431."""
Got = h11.Request | Refusal | None
"""What reading a request head gives: the head, a refusal of its bytes, or None (the peer left)."""
_TURNED_AWAY_BYTES: Final = {
    status: http_refusal(
        status, reason, retry_s, (words + "\n").encode(), "text/plain; charset=utf-8"
    )
    for status, (reason, retry_s, words) in TURNED_AWAY.items()
}
"""The whole answers to strangers turned away (`edgerules.TURNED_AWAY`), in the words of
the door's other refusals (plain text), made once."""


@dataclass(frozen=True, slots=True)
class DoorListenerSettings:
    """The door listener's rules (config: `door_handshake_s`, `door_silence_s`, `door_ping_s`).

    Args:
        handshake_s: from accept to a whole request head, seconds; past it: 408.
        silence_s: an uplink that sends nothing (pongs included) this long is closed, seconds.
        ping_s: how often the door pings an uplink, seconds.
        max_message: the largest WebSocket message taken, bytes (past it: Close 1009).
        exempt: trusted proxies, whose connections hold no strangers' slot.
        source: (TCP peer, `X-Forwarded-For` values) -> the box's address for the door's
            limits (the client behind trusted proxies).
    """

    handshake_s: float
    silence_s: float
    ping_s: float
    max_message: int
    exempt: tuple[Network, ...] = ()
    source: Callable[[str, list[str]], str] = lambda peer, _forwarded: peer


class _Counted:
    """What one connection of the door's listener is doing, for `ftwbridge_connections`."""

    __slots__ = ("ws",)

    def __init__(self) -> None:
        self.ws: LeanSocket | None = None

    @property
    def connection_state(self) -> State:
        if self.ws is None:
            return State.IDLE  # no whole request head yet
        return State.CLOSING if self.ws.closed else State.WEBSOCKET


class DoorListener:
    """The accept loop's per-connection work (see the module).

    Args:
        serve: the door's `serve_uplink`, given each upgraded connection.
        settings: the listener's rules.
        on_fault: told `websocket` for each connection a peer's bytes ended.
        connections: where its open connections and its strangers turned away are counted
            (`ftwbridge_connections{listener="door"}`), if given.
    """

    def __init__(
        self,
        serve: Callable[[LeanSocket], Awaitable[None]],
        settings: DoorListenerSettings,
        on_fault: Callable[[str], None] | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.serve = serve
        self.settings = settings
        self.on_fault = on_fault
        self.connections = connections if connections is not None else Connections()
        self.strangers = Slots(MAX_STRANGERS, STRANGERS_PER_SOURCE)
        self.refused = 0
        """Connections answered with a refusal before their 101 (a bad head, too slow)."""

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one accepted connection to its end; raises nothing but cancellation."""
        counted = _Counted()
        self.connections.add(counted)
        peer = peer_host(stream)  # now: once the socket is closed its peer is unknown
        try:
            ws = counted.ws = await self._open(stream, peer)
            if ws is not None:
                await self._run(ws)
        except Exception as exc:  # one connection's fault ends that connection alone
            gone = (trio.BrokenResourceError, trio.ClosedResourceError)
            if isinstance(exc, gone) or (
                isinstance(exc, ExceptionGroup) and exc.split(gone)[1] is None
            ):  # a box that reads nothing (`wsock.SEND_S`) or left broke no rule
                log.debug("the door let %s go: it took no bytes in time, or left", peer)
            else:
                while isinstance(exc, ExceptionGroup):
                    exc = exc.exceptions[0]  # the first of them names it
                self._report(peer, f"{type(exc).__name__}: {str(exc)[:200]}")
        finally:
            self.connections.discard(counted)
            await trio.aclose_forcefully(stream)

    async def _open(self, stream: trio.SocketStream, peer: str) -> LeanSocket | None:
        """The handshake, its head read in a stranger's slot; None when the connection was
        turned away (counted `refused` on arrival, `shed` for a lighter address's, and told
        so in words at once: `edgerules.TURNED_AWAY`) or refused."""
        source = source_key(peer, self.settings.exempt)
        if source is None:
            return await self._answer(stream, peer, await self._head(stream))
        try:
            with self.strangers.hold(source) as scope:
                with scope:
                    got = await self._head(stream)
                if not scope.cancelled_caught:
                    return await self._answer(stream, peer, got)
                how, status = "shed", 503  # a lighter address's arrival cancelled it
        except SlotRefused:
            how, status = "refused", turned_away_status(self.strangers, source)
        self.connections.turned_away[how] += 1
        say_at_once(stream, _TURNED_AWAY_BYTES[status])
        return None

    async def _head(self, stream: trio.SocketStream) -> tuple[h11.Connection, Got]:
        """h11 with one request head read, within `handshake_s`, and what was read (see
        `_read_head`; no whole head in time: a 408 `Refusal`)."""
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        got: Got = Refusal(408, "No whole request head in time.")
        with trio.move_on_after(self.settings.handshake_s):
            got = await _read_head(stream, h)
        return h, got

    async def _answer(
        self, stream: trio.SocketStream, peer: str, read: tuple[h11.Connection, Got]
    ) -> LeanSocket | None:
        """Answer the head read: a refusal in words, or the 101 (RFC 6455 section 4.2.2)
        and the box's socket."""
        h, got = read
        if got is None:  # the peer left
            return None
        verdict = classify_upgrade(got) if isinstance(got, h11.Request) else got
        if not isinstance(verdict, Upgrade):  # a refusal: the head's, or no whole head in time
            self.refused += 1
            await _last_words(stream, refusal_head(verdict))
            return None
        assert isinstance(got, h11.Request)
        request = got
        head = h.send(accept_response(verdict.key)) or b""
        trailing, _closed = h.trailing_data
        forwarded = [v.decode("latin-1") for k, v in request.headers if k == b"x-forwarded-for"]
        ws = LeanSocket(
            stream,
            Connection(ConnectionType.SERVER),
            self.settings.source(peer, forwarded),
            silence_s=self.settings.silence_s,
            max_message=self.settings.max_message,
            initial=bytes(trailing),
        )
        await ws.write(head)
        return ws

    async def _run(self, ws: LeanSocket) -> None:
        """The uplink, with its pings, then its close: 1000 when the door left it open, and
        the box's Close waited for (`LeanSocket.drain`)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ws.watch, self.settings.ping_s)
            with contextlib.suppress(BoxGone):
                await self.serve(ws)
            if not ws.closed:
                await close_ws(ws, 1000, "")
            await ws.drain()
            nursery.cancel_scope.cancel()
        if ws.fault is not None:
            self._report(ws.remote_addr, ws.fault)

    def _report(self, peer: str, why: str) -> None:
        log.warning(
            "connection fault from %s (websocket): %s; that connection is closed", peer, why
        )
        if self.on_fault is not None:
            self.on_fault("websocket")


async def _read_head(stream: trio.SocketStream, h: h11.Connection) -> Got:
    """The request head (and its end: a body is refused), a `Refusal` for bytes h11 will not
    parse, or None when the peer left first."""
    request: h11.Request | None = None
    while True:
        try:
            event = h.next_event()
        except h11.RemoteProtocolError as exc:
            return Refusal(exc.error_status_hint, "A malformed HTTP request.")
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive_some(RECV_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            h.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request
        elif isinstance(event, h11.Data):
            return Refusal(400, "An opening handshake has no body.")
        else:  # ConnectionClosed, PAUSED before a request
            return None


async def _last_words(stream: trio.SocketStream, data: bytes) -> None:
    """Write a refusal, bounded by `LAST_WORDS_S`; a peer that is gone is let go."""
    with trio.move_on_after(LAST_WORDS_S):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(data)


async def serve_door_listener(
    listener: DoorListener,
    sock: socket.socket,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept on the bound, listening `sock` until cancelled, each connection served by
    `listener.handle` in its own task. Reports `ws://host:port` (the door's URL) as started."""
    trio_sock = trio.socket.from_stdlib_socket(sock)
    host, port = sock.getsockname()[:2]
    url = f"ws://{'[' + host + ']' if ':' in host else host}:{port}/v1/box"
    task_status.started(url)
    patient = PatientListener(trio.SocketListener(trio_sock), f"the door's listener on {url}")
    await trio.serve_listeners(listener.handle, [patient])
