"""What goes out on a guarded connection: hypercorn's writes, with fewer waits, bounded, and
the last words a connection is owed (the `ftwbridge.edge` package's docstring lists the names
of hypercorn used here and why). `WritingServer` is the base of `guard.GuardedTCPServer`,
which adds the read side and the fault guard; this class also keeps what a connection is
doing (`connection_state`) and reports a fault (`_report`)."""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Final

import h11
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.trio.tcp_server import TCPServer

from ftwbridge.edgerules import (
    BAD_REQUEST,
    LAST_WORDS_S,
    SERVER_ERROR,
    TURNED_AWAY,
    WRITE_S,
    State,
    announces_body,
)
from ftwbridge.fairshare import Slots
from ftwbridge.idle import IdleTimer
from ftwbridge.listening import http_refusal, say_at_once

log = logging.getLogger("ftwbridge.edge")


def _jsonrpc_refusal(status: int, reason: str, retry_after_s: int | None, words: str) -> bytes:
    """A refusal a hypercorn listener makes itself, before any app: the JSON-RPC error
    `/mcp` answers with (id null, -32603, as its own 503s), `words` in `message`."""
    error = {"code": -32603, "message": words}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    return http_refusal(status, reason, retry_after_s, body, "application/json")


TURNED_AWAY_BYTES: Final = {
    status: _jsonrpc_refusal(status, *answer) for status, answer in TURNED_AWAY.items()
}
"""The whole answers to strangers turned away, by status, made once."""
HEAD_TIMEOUT_BYTES: Final = _jsonrpc_refusal(
    408,
    "Request Timeout",
    None,
    "No whole request head came within the listener's keep-alive time; send it again whole.",
)
"""What a connection with part of a request head gets when the keep-alive timer closes it
(RFC 9110 section 15.5.9)."""


class WritingServer(TCPServer):
    """hypercorn's `TCPServer` with its write path changed (`protocol_send`) and the state
    both the write and the read side keep."""

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
        self._faulted = False
        self._busy = False
        self._closing = False
        self._stranger: tuple[Slots, str, trio.CancelScope] | None = None
        self._partial_head = False
        """Bytes have come since the last request started or ended: part of a head."""
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
        if self._closing or self._faulted:
            return State.CLOSING
        if self._kind() == "http2":
            return State.HTTP2
        return State.REQUEST if self._busy else State.IDLE

    async def protocol_send(self, event: Event) -> None:
        """hypercorn's send, noting what went out (any bytes, a 101 to h2c, whether a request
        is under way) and writing it with fewer waits than hypercorn's own:

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
        - on the hot path (a held head with what follows it) the send lock is taken without a
          scheduler turn when it is free, and the empty chunk that ends a response with a
          length writes nothing. Everything else goes through hypercorn's own write
          (`_write(turn=True)`), turns included: its error paths depend on them;
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
        if isinstance(event, Updated):
            self._busy = not event.idle
            self._partial_head = False
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
        if self._head_due and data.startswith(b"HTTP/1.1 "):
            head = data.lower()  # h11 writes a head alone, in one piece: a few hundred bytes
            if head.startswith(b"http/1.1 101 "):
                self._head_due = False  # to h2c: HTTP/2 follows (no listener accepts a WebSocket)
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
        stream), but bounded by the listener's read timeout (`WRITE_S` on a listener with
        none, the admin one): a peer that has not taken our bytes by then (it reads nothing, and its buffers and ours are full) is let go, the
        socket closed and every task of the connection cancelled. hypercorn waits for it for
        ever, holding the socket, the tasks and the answer's buffers.

        Raises:
            trio.BrokenResourceError: the peer is gone, or was let go here.
            trio.ClosedResourceError: the socket was closed meanwhile.
        """
        limit = self.config.read_timeout or WRITE_S  # the admin listener has no read timeout
        if self._streaming:
            limit = getattr(self.config, "stream_write_s", None) or limit
        deadline = trio.current_time() + limit
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

    async def _close(self) -> None:
        # hypercorn closes from whichever task sends `Closed`; when that is the app's task,
        # Quart-trio is cancelling it already and the close never happened: a response to
        # `Connection: close` left its socket open until the read timeout. Shielded, bounded.
        # A stranger shed for a lighter address's is told so first, if nothing was sent yet.
        self._closing = True
        shed = self._stranger is not None and self._stranger[2].cancel_called
        if shed and self._bytes_sent == 0 and not self._held:
            self._bytes_sent = len(TURNED_AWAY_BYTES[503])
            say_at_once(self.stream, TURNED_AWAY_BYTES[503])
        with trio.CancelScope(shield=True, deadline=trio.current_time() + LAST_WORDS_S):
            await super()._close()

    def _stream(self, on: bool) -> None:
        """A `text/event-stream` response starts (`on`) or ends: the read timeout is lifted
        for it, and put back (from now) when it ends."""
        if on == self._streaming:
            return
        self._streaming = on
        limit = self.config.read_timeout
        self._read_scope.deadline = math.inf if on or not limit else trio.current_time() + limit

    def _known(self) -> None:
        """A request head is whole: the connection is no stranger any more."""
        if self._stranger is not None:
            strangers, source, scope = self._stranger
            self._stranger = None
            strangers.share.release(source, scope)

    def _kind(self) -> str:
        protocol = getattr(getattr(self, "protocol", None), "protocol", None)
        if isinstance(protocol, H2Protocol):
            return "http2"
        return "http"

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
