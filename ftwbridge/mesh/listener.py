"""The internal listener: forwarded `/mcp` calls and relayed door messages from the other
instances, on trio streams with no HTTP server around them (docs/operations.md, "The
internal listener"; docs/performance.md, "The cluster hop").

`serve_internal(listener, sock)` accepts on the bound socket; `InternalListener.handle` serves
each connection in its own task: TLS first when a server context is given (`mesh/tls.py`),
then requests one after another on the kept-alive connection (`wire.HolderWire`: its bounds
on head, body and idleness), each whole request handed to the route of its path (`routes`:
`calls.ForwardedCalls` for `/mcp`, `relay.RelayedMessages` for `relay.RELAY_PATH`), and
anything else answered 404 in words; an answer of 400 or more ends its connection, so a peer
without the mesh key holds none past its first request. Every write is bounded by `write_s`:
a whole answer, or a streamed one's pieces (a forwarded `subscriptions/listen`), which is
cancelled when the sender hangs up. Whatever a connection's bytes make happen ends that connection alone: a refusal in HTTP's
form, its socket closed, one warning line and `on_fault("http")` for bytes that are not
HTTP/1.1. Until its first whole request head a connection holds a slot of the listener's
strangers (`fairshare.Slots`, keyed on its TCP peer: docs/operations.md, "Limits that
strangers cannot fill"; turned away, it is told 429 or 503 in plain TCP); past
`MAX_CONNECTIONS` open connections a new one is answered 503 (inside TLS while
`OVER_LIMIT_TLS_PER_S` lasts) and closed.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import trio

from ftwbridge.edgerules import (
    LAST_WORDS_S,
    MAX_STRANGERS,
    STRANGERS_PER_SOURCE,
    TURNED_AWAY,
    Connections,
    State,
    turned_away_status,
)
from ftwbridge.fairshare import SlotRefused, Slots, source_key
from ftwbridge.listening import PatientListener, http_refusal, peer_host, say_at_once
from ftwbridge.mcp.http import HttpResponse
from ftwbridge.proto.pacing import TokenBucket

from .lean import server_tls
from .wire import (
    CLOSE,
    HEAD_S,
    NEED_DATA,
    Event,
    HolderWire,
    Phase,
    Refusal,
    Request,
    refusal_body,
    refusal_bytes,
)

log = logging.getLogger("ftwbridge.mesh")

MAX_CONNECTIONS: Final = 4096
"""Open connections at most, all peers together (an instance keeps up to 64 pooled); the
first request head of each is waited for in a stranger's slot (`edgerules.MAX_STRANGERS`,
per address `STRANGERS_PER_SOURCE`), so strangers cannot fill it."""
OVER_LIMIT_TLS_PER_S: Final = 8.0
"""TLS handshakes a second (after a burst of `OVER_LIMIT_TLS_BURST`) spent on connections
past `max_connections`, so that each is told its 503 inside TLS, where a TLS client can read
it; past that rate such a connection is closed with no byte. A handshake costs the listener
about half a millisecond of CPU (an ECDHE and a P-256 signature: 0.45 ms measured) and the
socket for its round trips: a flood past the limit may take under 1 % of a core and about 16
sockets, never more; a plain-text 503 before the handshake reads to a TLS client as a
protocol error."""
OVER_LIMIT_TLS_BURST: Final = 16.0
RECEIVE_BYTES: Final = 65_536
"""The most read from a connection at once, bytes."""

_TURNED_AWAY_BYTES: Final = {
    status: http_refusal(status, reason, retry_s, refusal_body(words, None), "application/json")
    for status, (reason, retry_s, words) in TURNED_AWAY.items()
}
"""The whole answers to strangers turned away (`edgerules.TURNED_AWAY`), in the JSON of the
listener's other refusals, made once."""

Route = Callable[[Request, str], Awaitable[HttpResponse]]
"""One path's answerer: (the whole request, the peer's address) -> the answer."""


@dataclass(frozen=True, slots=True)
class InternalSettings:
    """The internal listener's bounds (config: `max_body_bytes`, `body_timeout_s`,
    `keep_alive_s`, `listen_stuck_s`).

    Args:
        max_body_bytes: the largest request body, bytes (413 past it).
        body_s: from a whole head to its whole body, s (408 past it).
        idle_s: a kept-alive connection with no request this long is closed, s.
        write_s: each write of an answer (whole, or a streamed one's piece), s (past it the
            connection is closed).
        head_s: from a request's first byte to its whole head, s (408 past it); also the
            TLS handshake's bound.
        max_connections: open connections at most (503 past it).
    """

    max_body_bytes: int
    body_s: float
    idle_s: float
    write_s: float
    head_s: float = HEAD_S
    max_connections: int = MAX_CONNECTIONS


class _Counted:
    """One connection, for `ftwbridge_connections{listener="internal"}`."""

    __slots__ = ("wire",)

    def __init__(self, wire: HolderWire) -> None:
        self.wire = wire

    @property
    def connection_state(self) -> State:
        phase = self.wire.phase
        if phase is Phase.IDLE:
            return State.IDLE
        return State.CLOSING if phase is Phase.CLOSED else State.REQUEST


class InternalListener:
    """The accept loop's per-connection work (see the module).

    Args:
        routes: path -> its `Route`.
        settings: the bounds.
        tls: the server's TLS context (`tls.server_context`), or None: plain TCP.
        on_fault: told `http` for each connection whose bytes were not HTTP/1.1.
        connections: where its open connections are counted, if given.
    """

    def __init__(
        self,
        routes: Mapping[str, Route],
        settings: InternalSettings,
        *,
        tls: ssl.SSLContext | None = None,
        on_fault: Callable[[str], None] | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.routes = dict(routes)
        self.settings = settings
        self.tls = tls
        self.on_fault = on_fault
        self.connections = connections if connections is not None else Connections()
        self.strangers = Slots(MAX_STRANGERS, STRANGERS_PER_SOURCE)
        self.open = 0
        """Connections open now."""
        self.over_limit_tls = TokenBucket(OVER_LIMIT_TLS_BURST, OVER_LIMIT_TLS_PER_S)
        """The TLS handshakes to spend on connections past `max_connections` (their 503)."""
        self.closed_over_limit = 0
        """Connections past `max_connections` closed with no word (TLS, the bucket empty)."""

    async def handle(self, tcp: trio.abc.Stream) -> None:
        """Serve one accepted connection (a `trio.SocketStream`; any stream in tests) to its
        end; raises nothing but cancellation."""
        peer = peer_host(tcp)
        s = self.settings
        wire = HolderWire(
            now=trio.current_time(),
            max_body_bytes=s.max_body_bytes,
            body_s=s.body_s,
            idle_s=s.idle_s,
            head_s=s.head_s,
        )
        counted = _Counted(wire)
        self.open += 1
        self.connections.add(counted)
        try:
            if self.open > s.max_connections:
                await self._over_limit(tcp, peer)
                return
            opened = await self._admitted(tcp, wire, peer)
            if opened is not None:
                await self._serve(opened[0], wire, peer, opened[1])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer left
        except Exception:  # a stream's failure ends that connection alone, logged in full
            log.exception("internal listener: a connection from %s failed", peer)
        finally:
            self.open -= 1
            self.connections.discard(counted)
            await trio.aclose_forcefully(tcp)

    async def _admitted(
        self, tcp: trio.abc.Stream, wire: HolderWire, peer: str
    ) -> tuple[trio.abc.Stream, Event] | None:
        """The TLS handshake and the first request's whole head, in a stranger's slot: the
        connection's stream and its first event; None when it was turned away (counted
        `refused` on arrival, `shed` for a lighter address's) or its TLS failed."""
        source = source_key(peer) or peer
        try:
            with self.strangers.hold(source) as scope:
                with scope:
                    stream = await self._secured(tcp, peer)
                    if stream is None:
                        return None
                    event = wire.next_event()
                    while event is NEED_DATA and wire.phase in (Phase.IDLE, Phase.HEAD):
                        event = await self._next(stream, wire)
                    return stream, event
                how = "shed"  # only reached when a lighter address's arrival cancelled it
        except SlotRefused:
            how = "refused"
        self.connections.turned_away[how] += 1
        status = 503 if how == "shed" else turned_away_status(self.strangers, source)
        # words in plain TCP only: in TLS they would cost a stranger's handshake each
        say_at_once(tcp, b"" if self.tls is not None else _TURNED_AWAY_BYTES[status])
        return None

    async def _over_limit(self, tcp: trio.abc.Stream, peer: str) -> None:
        """A connection past `max_connections`: 503 in words; in TLS only while
        `over_limit_tls` has a handshake to spend on it (within `LAST_WORDS_S` twice), else
        a clean close with no byte (see `OVER_LIMIT_TLS_PER_S`)."""
        words = (
            f"More than {self.settings.max_connections} connections are open; try again shortly."
        )
        answer = refusal_bytes(503, words, None)
        if self.tls is None:
            await _last_words(tcp, answer)
            return
        if not self.over_limit_tls.try_take(trio.current_time()):
            self.closed_over_limit += 1
            say_at_once(tcp, b"")
            return
        tls = server_tls(tcp, self.tls)
        with trio.move_on_after(LAST_WORDS_S * 2):
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                log.info("internal listener: no TLS handshake from %s (%s)", peer, exc.__cause__)
                return
            await _last_words(tls, answer)

    async def _secured(self, tcp: trio.abc.Stream, peer: str) -> trio.abc.Stream | None:
        """The connection's stream: `tcp`, or TLS over it once its handshake is done within
        `head_s` (None when it is not: logged)."""
        if self.tls is None:
            return tcp
        tls = server_tls(tcp, self.tls)
        with trio.move_on_after(self.settings.head_s):
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                log.info("internal listener: no TLS handshake from %s (%s)", peer, exc.__cause__)
                return None
            return tls
        return None

    async def _next(self, stream: trio.abc.Stream, wire: HolderWire) -> Event:
        """Bytes owed sent, then bytes read until the wire has an event other than
        `NEED_DATA`, or its wait's end."""
        owed = wire.data_to_send()
        if owed and not await self._write(stream, owed):
            return CLOSE
        data = None
        with trio.move_on_at(wire.wake_at()):
            data = await stream.receive_some(RECEIVE_BYTES)
        if data is None:
            return wire.timed_out()
        wire.receive_data(data, trio.current_time())
        return wire.next_event()

    async def _serve(
        self, stream: trio.abc.Stream, wire: HolderWire, peer: str, event: Event
    ) -> None:
        """Requests one after another, from `event` on, until the connection ends."""
        while True:
            while event is NEED_DATA:
                event = await self._next(stream, wire)
            if event is CLOSE:
                return
            if isinstance(event, Refusal):
                self._refused(event, peer)
                await _last_words(stream, wire.refuse(event))
                return
            assert isinstance(event, Request)
            route = self.routes.get(event.path)
            if route is None:
                resp = _not_found(event.path, sorted(self.routes))
            else:
                resp = await self._answer(route, event, peer)
            if resp.stream is not None:
                await self._stream(stream, wire, resp)
                return
            if not await self._write(stream, wire.answer(resp.status, resp.headers, resp.body)):
                return
            if not wire.next_cycle(trio.current_time()):
                return
            event = wire.next_event()

    async def _write(self, stream: trio.abc.Stream, data: bytes) -> bool:
        """Write `data` within `write_s`; False when the peer took too long (it reads none
        of what it asked for: the connection ends, closed by `handle`)."""
        with trio.move_on_after(self.settings.write_s):
            await stream.send_all(data)
            return True
        return False

    async def _answer(self, route: Route, request: Request, peer: str) -> HttpResponse:
        """`route`'s answer; a route that fails is logged in full and answered 500 in words,
        and that connection closes after it."""
        try:
            return await route(request, peer)
        except Exception:
            log.exception("internal listener: %s %s failed", request.method, request.path)
            words = "The instance failed to answer this request; it is logged there."
            body = refusal_body(words, request.path)
            return HttpResponse(
                500, {"content-type": "application/json", "connection": "close"}, body
            )

    async def _stream(self, stream: trio.abc.Stream, wire: HolderWire, resp: HttpResponse) -> None:
        """Write `resp.stream`'s pieces as they come (its head with the first), until it
        returns, the sender hangs up, or a write takes longer than `write_s`; the connection
        closes after it."""
        assert resp.stream is not None
        head = True
        async with trio.open_nursery() as nursery:

            async def send(data: bytes) -> None:
                with trio.move_on_after(self.settings.write_s) as scope:
                    try:
                        await stream.send_all(data)
                        return
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the sender left
                if scope.cancelled_caught:
                    log.info("internal listener: a stream's write took over its bound")
                nursery.cancel_scope.cancel()

            async def write(chunk: bytes) -> None:
                nonlocal head
                data = wire.stream_head(resp.status, resp.headers) if head else b""
                head = False
                await send(data + wire.stream_piece(chunk))

            async def until_gone() -> None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while await stream.receive_some(RECEIVE_BYTES):
                        pass  # nothing more is read on this connection: its close ends it
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_gone)
            await resp.stream(write)
            end = wire.stream_head(resp.status, resp.headers) if head else b""
            await send(end + wire.stream_end())
            nursery.cancel_scope.cancel()

    def _refused(self, refusal: Refusal, peer: str) -> None:
        if not refusal.fault:
            return
        log.warning(
            "connection fault from %s (http): %s; that connection is closed", peer, refusal.words
        )
        if self.on_fault is not None:
            self.on_fault("http")


def _not_found(path: str, paths: list[str]) -> HttpResponse:
    words = f"Nothing at {path[:200]}: this listener serves only {', '.join(paths)}."
    return HttpResponse(404, {"content-type": "application/json"}, refusal_body(words, None))


async def _last_words(stream: trio.abc.Stream, data: bytes) -> None:
    """Write a refusal, then read and drop what the peer still sends until it closes, all
    within `LAST_WORDS_S` (so the kernel does not answer unread bytes with a reset that
    would destroy the refusal, RFC 9112 section 9.6); a peer that is gone is let go."""
    with trio.move_on_after(LAST_WORDS_S):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(data)
            while await stream.receive_some(RECEIVE_BYTES):
                pass


async def serve_internal(
    listener: InternalListener,
    sock: socket.socket,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept on the bound, listening `sock` until cancelled, each connection served by
    `listener.handle` in its own task. Reports started at once."""
    host, port = sock.getsockname()[:2]
    plain = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    listeners = [PatientListener(plain, f"the internal listener on {host}:{port}")]
    task_status.started()
    await trio.serve_listeners(listener.handle, listeners)
