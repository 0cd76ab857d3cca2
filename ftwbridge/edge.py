"""Fault isolation per connection, and the one module that knows hypercorn's insides.

hypercorn 0.18 lets any error but `OSError` escape a connection's task and cancel the server's
nursery, every connection of the process with it (`docs/upstream-hypercorn.md`). `serve` is
`hypercorn.trio.serve` with our own accept loop, which builds a `GuardedTCPServer` per
connection; hypercorn's modules are never assigned to. The guard keeps hypercorn's behaviour
for every well-formed connection, and an error out of one connection ends that connection
alone: its last words (a `400` when nothing was sent yet, or a Close `1002` after the upgrade,
RFC 6455 section 7.4.1), the socket closed, its tasks cancelled, one warning line and
`EdgeConfig.on_connection_fault(kind)`. A `text/event-stream` response (a listen stream,
docs/live.md) lifts the read timeout while it is under way, its writes bounded by
`EdgeConfig.stream_write_s` instead (docs/operations.md, "One connection's fault ends only
that connection", has the rest of the rules).

What of hypercorn (the 0.18 line, bounded so in pyproject.toml) this module uses beyond its
public `serve` and `Config`, and why; `tests/edge/test_hypercorn.py` pins each name:

- `hypercorn.trio.tcp_server.TCPServer`, subclassed: its `run`, `protocol_send`, `_read_data`
  (replaced by `_read_loop`, a copy, to lift the read timeout for a stream), `_close` (made to
  close even from a cancelled task), `_initiate_server_close` (the keep-alive timer's action),
  and its attributes `config`, `context`, `stream`, `protocol`, `send_lock`, `idle_task`
  (replaced by `ftwbridge.idle.IdleTimer`) and `_task_group._nursery` (cancelled to end every
  task of a faulted connection);
- `hypercorn.trio.tcp_server.MAX_RECV`: the read size of the copied loop;
- `hypercorn.protocol.h2.H2Protocol` and a connection's `protocol.protocol` (which protocol it
  speaks) and `protocol.protocol.connection` (h11's connection, whose public `their_state`
  tells a peer's bad bytes from an app's failure);
- `hypercorn.events` `Closed`, `Event`, `RawData`, `Updated`: what `protocol_send` is given;
- for the accept loop, a copy of `hypercorn.trio.run.worker_serve`: `trio.lifespan.Lifespan`,
  `trio.worker_context.WorkerContext`, `trio.statsd.StatsdLogger`, `typing.ConnectionState`,
  and `utils` `wrap_app`, `raise_shutdown`, `repr_socket_addr`, `ShutdownError`.

Elsewhere ftwbridge uses none of these: `edgerules.EdgeConfig` subclasses the public `Config`,
and the door catches `hypercorn.utils.UnexpectedMessageError` (a send on a closed WebSocket).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Awaitable, Callable
from functools import partial
from random import randint
from typing import Any

import h11
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.statsd import StatsdLogger
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown, repr_socket_addr, wrap_app

from ftwbridge.edgerules import (
    BAD_REQUEST,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_REPLY_S,
    FAILING_CODES,
    LAST_WORDS_S,
    PEER_FAULTS,
    SERVER_ERROR,
    ProtocolViolation,
    announces_body,
)
from ftwbridge.edgerules import Connections as Connections  # ftwbridge.metrics counts them
from ftwbridge.edgerules import EdgeConfig as EdgeConfig  # what `serve` is given
from ftwbridge.edgerules import State as State
from ftwbridge.fairshare import SlotRefused, Slots, source_key
from ftwbridge.idle import IdleTimer

log = logging.getLogger("ftwbridge.edge")


class GuardedTCPServer(TCPServer):
    """hypercorn's connection handler with one change: a fault ends this connection alone.

    Everything a peer can make hypercorn raise is caught at the two places it surfaces: the
    read loop (`_read_data`, where received bytes are parsed) and the connection task as a whole
    (`run`, where errors of the connection's own tasks such as pings arrive). Cancellation is
    never caught.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bytes_sent = 0
        self._held = b""
        """A response head waiting to be written with its body (`protocol_send`)."""
        self._ended_by_empty = False
        """A held head went out with its body: the empty chunk that ends it writes nothing."""
        self._head_due = True
        """HTTP/1.1 with no response under way: the next bytes are a head, not body bytes
        (which may look like one)."""
        self._upgraded = False
        self._close_sent = False
        self._faulted = False
        self._close_timer = trio.CancelScope()
        self._discarding = False
        self._busy = False
        self._closing = False
        self._stranger: tuple[Slots, str, trio.CancelScope] | None = None
        self._streaming = False
        """A `text/event-stream` response is under way (`EdgeConfig.stream_write_s`)."""
        self._read_scope = trio.CancelScope()
        self.idle_task = IdleTimer(  # type: ignore[assignment]
            self.config.keep_alive_timeout,
            self.context.terminated,
            self._initiate_server_close,
        )

    @property
    def connection_state(self) -> State:
        """What this connection is doing now (see `State`)."""
        if self._closing or self._close_sent or self._faulted:
            return State.CLOSING
        if self._upgraded:
            return State.WEBSOCKET
        if self._kind() == "http2":
            return State.HTTP2
        return State.REQUEST if self._busy else State.IDLE

    async def protocol_send(self, event: Event) -> None:
        """hypercorn's send, noting what went out (any bytes, the 101, a Close frame, whether
        a request is under way) and writing it with fewer waits than hypercorn's own:

        - an HTTP/1.1 final response head that announces a body by its `Content-Length` is
          held and written in one `send` with what follows it (its body, or nothing for HEAD);
          hypercorn writes head, body and end of message in three, each a turn of the
          scheduler. One write also means an instance killed mid-answer leaves a whole answer
          or none, never a head whose body does not come (which a proxy in front can neither
          word nor send elsewhere; docs/operations.md, "Keep-alive behind a proxy"); when the
          connection closes with a head still held (its app failed before the body, or the
          peer broke its request's body), a 500 or 400 goes out in its place. A streamed
          response (no length) is written as it comes, and so are heads with no body to
          follow: hypercorn's own refusals (`content-length: 0`) race the app's answer, and
          their order decides how the connection ends;
        - on those two hot paths (a held head with what follows it, and a WebSocket data frame)
          the send lock is taken without a scheduler turn when it is free, and the empty
          chunk that ends a response with a length writes nothing. Everything else goes
          through hypercorn's own write (`_write(turn=True)`), turns included: its error paths
          depend on them;
        - every write is bounded by the listener's read timeout (`_send_all`): a peer that
          takes none of our bytes is let go, not waited for as long as it keeps the socket.
        """
        if isinstance(event, RawData):
            await self._send_data(event.data)
            return
        if self._held:  # a held head goes out before the connection idles or closes
            held, self._held = self._held, b""
            if isinstance(event, Closed):  # its body will never come: words instead
                held = self._words_for_held_head()
            self._bytes_sent += len(held)
            await self._write(held)
        if isinstance(event, Closed) and self._upgraded and not self._close_sent:
            # hypercorn ends a WebSocket whose frame wsproto could not parse without a Close;
            # RFC 6455 section 7.1.7 asks for one first, with 1002 for a protocol error.
            self._report(ProtocolViolation("a frame that breaks RFC 6455 section 5"))
            self._close_sent = True
            await self._write(CLOSE_PROTOCOL_ERROR, turn=True)
        elif isinstance(event, Updated):
            self._busy = not event.idle
            if self._busy:
                self._known()
            if event.idle:
                self._head_due = True  # the response is done; the next one starts with a head
                self._stream(False)
        await super().protocol_send(event)

    async def _send_data(self, data: bytes) -> None:
        """Write what hypercorn sends as `RawData` (see `protocol_send`)."""
        if self._held:  # the body or the end of a held head: both in one write
            data, self._held = self._held + data, b""
            self._ended_by_empty = True
            self._bytes_sent += len(data)
            await self._write(data)
            return
        if not data and self._ended_by_empty:  # the end of the response just written
            self._ended_by_empty = False
            return
        self._ended_by_empty = False
        if self._upgraded:
            if data and data[0] != 0x88:  # a WebSocket frame other than Close
                self._bytes_sent += len(data)
                await self._write(data)
                return
            if data and not self._close_sent:
                self._close_sent = True
                code = int.from_bytes(data[2:4], "big") if data[1] >= 2 else None
                failing = code in FAILING_CODES
                self._discarding = failing  # what it still sends is read and dropped
                if code in PEER_FAULTS and not self._faulted:
                    self._report(ProtocolViolation(f"Close {code}: {PEER_FAULTS[code]}"))
                self._task_group.spawn(
                    self._close_unanswered, LAST_WORDS_S if failing else CLOSE_REPLY_S
                )
        elif self._head_due and data.startswith(b"HTTP/1.1 "):
            head = data.lower()  # h11 writes a head alone, in one piece: a few hundred bytes
            if head.startswith(b"http/1.1 101 "):
                self._head_due = False
                if b"\r\nupgrade: websocket" in head:
                    self._upgraded = True  # a 101 to h2c is HTTP/2, not a WebSocket
            elif head[9:10] != b"1":  # a final head (100 Continue comes before one)
                self._head_due = False
                if b"\r\ncontent-type: text/event-stream" in head:
                    self._stream(True)
                if announces_body(head):
                    self._held = data  # written with its body, or at the next event
                    return
        self._bytes_sent += len(data)
        await self._write(data, turn=True)

    def _words_for_held_head(self) -> bytes:
        """What goes out instead of a held head when the connection closes before its body:
        a head whose body never comes can be neither worded nor sent elsewhere by the client
        or a proxy, while nothing of this response is on the wire yet. 400 when hypercorn
        closes for the peer's bytes (h11 holds their side in ERROR), else 500 as hypercorn
        answers an app that fails before its head."""
        h11_connection = getattr(getattr(self.protocol, "protocol", None), "connection", None)
        if getattr(h11_connection, "their_state", None) is h11.ERROR:
            return BAD_REQUEST
        return SERVER_ERROR

    async def _write(self, data: bytes, *, turn: bool = False) -> None:
        """hypercorn's write of `data` (`TCPServer.protocol_send`, `RawData`): whole, under the
        send lock, shielded and bounded (`_send_all`); a peer that is gone closes the
        connection. A free lock is taken at once (`acquire_nowait`) unless `turn`, which takes
        it as hypercorn does, with a scheduler turn that its error paths depend on."""
        lock = self.send_lock
        if turn or lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            try:
                await self._send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await self.protocol.handle(Closed())
        finally:
            lock.release()

    async def _send_all(self, data: bytes) -> None:
        """`send_all(data)`, shielded as hypercorn does (a write cut midway would break the
        stream), but bounded by the listener's read timeout: a peer that has not taken our
        bytes by then (it reads nothing, and its buffers and ours are full) is let go, the
        socket closed and every task of the connection cancelled. hypercorn waits for it for
        ever, holding the socket, the tasks and the answer's buffers.

        Raises:
            trio.BrokenResourceError: the peer is gone, or was let go here.
            trio.ClosedResourceError: the socket was closed meanwhile.
        """
        limit = self.config.read_timeout
        if self._streaming:
            limit = getattr(self.config, "stream_write_s", None) or limit
        deadline = trio.current_time() + limit if limit else math.inf
        with trio.CancelScope(shield=True, deadline=deadline) as scope:
            await self.stream.send_all(data)
        if scope.cancelled_caught:
            log.debug("a peer took no answer bytes for %s s; its connection is closed", limit)
            self._closing = True
            with trio.CancelScope(shield=True):
                await self.stream.aclose()
            nursery = self._task_group._nursery
            if nursery is not None:
                nursery.cancel_scope.cancel()
            raise trio.BrokenResourceError("the peer took none of our bytes in time")

    async def _close_unanswered(self, wait_s: float) -> None:
        """RFC 6455 section 7.1.1: after its Close, the server closes the TCP connection; give
        the peer `wait_s` to answer (none when our Close fails the connection), then close."""
        with self._close_timer:
            await trio.sleep(wait_s)
            try:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + LAST_WORDS_S):
                    await self.protocol.handle(Closed())  # may wait on a full app queue
            finally:
                with trio.CancelScope(shield=True):
                    await self.stream.aclose()  # closes the socket, whatever happened above

    async def _close(self) -> None:
        # hypercorn closes from whichever task sends `Closed`; when that is the app's task,
        # Quart-trio is cancelling it already and the close never happened: a response to
        # `Connection: close` left its socket open until the read timeout. Shielded, bounded.
        self._closing = True
        self._close_timer.cancel()
        with trio.CancelScope(shield=True, deadline=trio.current_time() + LAST_WORDS_S):
            await super()._close()

    async def _read_data(self) -> None:
        parse = self.protocol.handle

        async def handle(event: Event) -> None:
            if not (self._discarding and isinstance(event, RawData) and event.data):
                await parse(event)

        self.protocol.handle = handle  # type: ignore[method-assign]
        try:
            await self._read_loop()
        except Exception as exc:
            await self._fault(exc)
        finally:
            self._close_timer.cancel()  # the connection has ended: no Close left to wait for
            # and no keep-alive timer either: it would hold the socket 5 s more
            self.idle_task.end()  # type: ignore[attr-defined]
            if self._upgraded:
                # hypercorn's WebSocket ping task sleeps `websocket_ping_interval` (the door's
                # 15 s) between pings, and the connection, its socket and its buffers with it,
                # waited for it to wake: 100 strangers held 20 MiB for 15 s. What is left of
                # an ended WebSocket gets `LAST_WORDS_S`, then is cancelled.
                nursery = self._task_group._nursery
                if nursery is not None:
                    scope = nursery.cancel_scope
                    scope.deadline = min(scope.deadline, trio.current_time() + LAST_WORDS_S)

    def _stream(self, on: bool) -> None:
        """A `text/event-stream` response starts (`on`) or ends: the read timeout is lifted
        for it, and put back (from now) when it ends."""
        if on == self._streaming:
            return
        self._streaming = on
        limit = self.config.read_timeout
        self._read_scope.deadline = math.inf if on or not limit else trio.current_time() + limit

    async def _read_loop(self) -> None:
        """hypercorn's `TCPServer._read_data`, with its read timeout in a scope of our own, so
        that a stream's response lifts it (`_stream`): the bytes read, the end of the loop and
        the `Closed` it hands on are hypercorn's."""
        while True:
            limit = self.config.read_timeout
            deadline = trio.current_time() + limit if limit and not self._streaming else math.inf
            with trio.CancelScope(deadline=deadline) as self._read_scope:
                try:
                    data = await self.stream.receive_some(MAX_RECV)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    break
            if self._read_scope.cancelled_caught:
                break  # the read timeout: hypercorn's TooSlowError
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
        await self.protocol.handle(Closed())

    async def run(self) -> None:
        """Serve the connection; a fault anywhere in it ends it alone (see the module). Until
        its first request head is whole it holds a slot of the listener's `strangers`, and
        ends at once if a lighter peer's arrival sheds it."""
        connections = getattr(self.config, "connections", None)
        if connections is not None:
            connections.add(self)
        try:
            strangers: Slots | None = getattr(self.config, "strangers", None)
            source = self._source()
            if strangers is None or source is None:
                await self._run_guarded()
                return
            with strangers.hold(source) as scope:
                self._stranger = (strangers, source, scope)
                with scope:
                    await self._run_guarded()
            if scope.cancelled_caught:
                log.debug("a connection from %s that sent no request was shed", source)
                if connections is not None:
                    connections.turned_away["shed"] += 1
        except SlotRefused:
            log.debug("a connection from %s was refused: it holds too many idle ones", source)
            if connections is not None:
                connections.turned_away["refused"] += 1
            with trio.CancelScope(shield=True):
                await self.stream.aclose()
        finally:
            if connections is not None:
                connections.discard(self)

    def _source(self) -> str | None:
        """The peer's address, the key of its stranger slots; None when it is exempt."""
        try:
            host = str(self.stream.socket.getpeername()[0])
        except (OSError, AttributeError, IndexError):
            return "?"
        return source_key(host, getattr(self.config, "exempt", ()))

    def _known(self) -> None:
        """A request head is whole: the connection is no stranger any more."""
        if self._stranger is not None:
            strangers, source, scope = self._stranger
            self._stranger = None
            strangers.share.release(source, scope)

    async def _run_guarded(self) -> None:
        try:
            await super().run()
        except BaseExceptionGroup as group:  # the stream is closed by hypercorn's `finally`
            cancelled, other = group.split(trio.Cancelled)
            if other is not None and not self._faulted:
                self._report(other)
            if cancelled is not None:
                raise cancelled from None  # the server's own cancellation goes on its way
            if other is not None and other.split(Exception)[1] is not None:
                raise  # KeyboardInterrupt and its kind are not a connection's fault
        except Exception as exc:
            if not self._faulted:
                self._report(exc)

    def _kind(self) -> str:
        protocol = getattr(getattr(self, "protocol", None), "protocol", None)
        if isinstance(protocol, H2Protocol):
            return "http2"
        return "websocket" if self._upgraded else "http"

    def _report(self, exc: BaseException) -> None:
        self._faulted = True
        kind = self._kind()
        try:
            peer = self.stream.socket.getpeername()
        except (OSError, AttributeError):
            peer = "?"
        log.warning(
            "connection fault from %s (%s): %s: %s; that connection is closed",
            peer,
            kind,
            type(exc).__name__,
            str(exc)[:200],
        )
        hook = getattr(self.config, "on_connection_fault", None)
        if hook is not None:
            hook(kind)

    async def _fault(self, exc: Exception) -> None:
        """Say what can still be said, close the socket, and end every task of the connection."""
        if not self._faulted:
            self._report(exc)
        last_words = b""
        if self._bytes_sent == 0 and not self._upgraded:
            last_words = BAD_REQUEST
        elif self._upgraded and not self._close_sent:
            last_words = CLOSE_PROTOCOL_ERROR
        with trio.move_on_after(LAST_WORDS_S):
            if last_words:
                try:
                    async with self.send_lock:
                        await self.stream.send_all(last_words)
                except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                    pass  # the peer is gone already; closing is all that is left
        with trio.CancelScope(shield=True):
            await self.stream.aclose()
        nursery = self._task_group._nursery
        if nursery is not None:
            nursery.cancel_scope.cancel()


async def serve(
    app: Any,
    config: EdgeConfig,
    *,
    shutdown_trigger: Callable[..., Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the ASGI `app` on `config`'s binds, each connection by a `GuardedTCPServer`:
    `hypercorn.trio.serve` with our own accept loop (its `worker_serve`, less QUIC, which no
    listener of ours binds). Reports the bound URLs (`http://host:port`) as started; returns
    once `shutdown_trigger` returns and the responses under way have had `graceful_timeout`.

    Raises:
        ValueError: `config` binds QUIC (`quic_bind`), which this loop does not serve.
    """
    if config.debug:
        warnings.warn("The config `debug` has no affect when using serve", Warning, stacklevel=2)
    if config.workers != 1:
        warnings.warn("The config `workers` has no affect when using serve", Warning, stacklevel=2)
    wrapped = wrap_app(app, config.wsgi_max_body_size, None)
    config.set_statsd_logger_class(StatsdLogger)
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(wrapped, config, lifespan_state)
    max_requests = None
    if config.max_requests is not None:
        max_requests = config.max_requests + randint(0, config.max_requests_jitter)
    context = WorkerContext(max_requests)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        connection = partial(
            GuardedTCPServer, wrapped, config, context, ConnectionState(lifespan_state.copy())
        )
        await _accept(connection, config, context, shutdown_trigger, task_status)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()


async def _accept(
    connection: Callable[[trio.abc.Stream], GuardedTCPServer],
    config: EdgeConfig,
    context: Any,
    shutdown_trigger: Callable[..., Awaitable[None]] | None,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    """The accept loop of `serve`: one `GuardedTCPServer` per connection in a nursery that
    outlives the listeners by `graceful_timeout` (hypercorn's `worker_serve`)."""
    async with trio.open_nursery() as server_nursery:
        sockets = config.create_sockets()
        if sockets.quic_sockets:
            raise ValueError("edge.serve serves TCP only; quic_bind is not supported")
        listeners: list[trio.abc.Listener[Any]] = []
        binds = []
        ssl_context = config.create_ssl_context()
        for sock in sockets.secure_sockets:
            assert ssl_context is not None  # secure sockets come with a certificate
            sock.listen(config.backlog)
            listeners.append(
                trio.SSLListener(
                    trio.SocketListener(trio.socket.from_stdlib_socket(sock)),
                    ssl_context,
                    https_compatible=True,
                )
            )
            binds.append(f"https://{repr_socket_addr(sock.family, sock.getsockname())}")
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
            listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
            binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
        for bind in binds:
            await config.log.info(f"Running on {bind} (CTRL + C to quit)")
        task_status.started(binds)
        try:
            async with trio.open_nursery(strict_exception_groups=True) as nursery:
                if shutdown_trigger is not None:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                nursery.start_soon(raise_shutdown, context.terminate.wait)
                nursery.start_soon(
                    partial(
                        trio.serve_listeners, connection, listeners, handler_nursery=server_nursery
                    )
                )
                await trio.sleep_forever()
        except BaseExceptionGroup as error:
            _, other_errors = error.split((ShutdownError, KeyboardInterrupt))
            if other_errors is not None:
                raise other_errors from None
        finally:
            await context.terminated.set()
            server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
