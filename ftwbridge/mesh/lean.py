"""The mesh's connections (the hop channel's to a holder, `mesh/channel.py`, and the internal
listener's from a sender, `mesh/listener.py`): one socket read and written by the tasks that
use it, with TLS done by the standard library's `ssl.SSLObject` on memory
buffers, instead of a `trio.SSLStream` over a record-cutting stream over a
`trio.SocketStream` (docs/performance.md, "Where the entry's CPU goes").

Why: those three layers cost a forward more than the rest of the channel did. Each read went
down through `SSLStream._retry`, its locks and conflict detectors, the record cutter and
`trio.socket`'s try-then-wait helper, and each ended with a scheduler turn of its own even
after it had waited; each write the same. Here a read asks the TLS object for plain bytes,
and only when it has none reads the socket (waiting on it only when it has nothing); a
write encrypts, then sends, waiting only while the socket's buffer is full. Every read and
write is a checkpoint, as trio's own streams are (trio's docs, "Checkpoints"): a cancelled
caller stops first (`checkpoint_if_cancelled`), and one that did not have to wait takes a
scheduler turn after it (`cancel_shielded_checkpoint`, the bytes already taken are never
lost), so a peer that keeps bytes coming neither starves the other tasks nor outruns a
deadline. Bytes TLS writes during a read (an alert, a KeyUpdate's answer) are sent after it.

The channel must tell that a pooled connection holds no byte past the answer it read (a
holder that sent a second answer in a TLS record of its own would have it read as the next
request's): with the TLS object's buffers in hand that is `holds_more()`, the encrypted
bytes not yet taken (`MemoryBIO.pending`) and the plain ones not yet read
(`SSLObject.pending()`), where `trio.SSLStream` exposes neither.

As HTTPS's rules for a close (RFC 9110 section 9.6; trio's `https_compatible`): the end of
the socket ends the stream without a TLS `close_notify`, and `aclose` sends one without
waiting for the peer's. Nothing here parses HTTP.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from typing import Any, Final

import trio

RECEIVE_BYTES: Final = 65_536
"""The most read from the socket at once, bytes."""


class LeanStream(trio.abc.Stream):
    """`tcp`'s socket read and written as it is (`tcp` is closed with this stream), in TLS
    through `tls` (on the buffers `incoming` and `outgoing`) when it is given (`lean_tls`
    makes one), else plain.

    One task at a time may receive and one may send (`trio.BusyResourceError` otherwise).
    Errors: `trio.BrokenResourceError` when the socket or the TLS layer fails (the cause is
    chained), also after a send that was cancelled midway; `trio.ClosedResourceError` after
    `aclose`.
    """

    __slots__ = (
        "_carry",
        "_in",
        "_out",
        "_read_waited",
        "_receiving",
        "_sending",
        "_state",
        "_tls",
        "_write_waited",
        "fd",
        "tcp",
    )

    def __init__(
        self,
        tcp: trio.SocketStream,
        tls: ssl.SSLObject | None = None,
        incoming: ssl.MemoryBIO | None = None,
        outgoing: ssl.MemoryBIO | None = None,
    ) -> None:
        self.tcp = tcp
        self.fd = tcp.socket.fileno()
        """The socket's descriptor (trio's sockets are non-blocking)."""
        self._tls = tls
        self._in = incoming or ssl.MemoryBIO()
        self._out = outgoing or ssl.MemoryBIO()
        self._carry = b""  # what TLS wrote in a read that the socket did not take at once
        self._receiving = False
        self._sending = False
        self._read_waited = False  # whether this receive waited (a turn taken already)
        self._write_waited = False  # the same for this send
        self._state = "open"  # "broken" after a failure or a cancelled send, "closed"

    def holds_more(self) -> bool:
        """Whether bytes came that were not read yet: in TLS, encrypted bytes the TLS object
        has not taken or plain bytes it has not handed out (the socket's own are the
        caller's to poll)."""
        return self._tls is not None and bool(self._in.pending or self._tls.pending())

    def _check(self) -> None:
        if self._state == "closed":
            raise trio.ClosedResourceError("this connection was closed")
        if self._state == "broken":
            raise trio.BrokenResourceError("this connection failed earlier")

    def _failure(self, words: str) -> trio.BrokenResourceError | trio.ClosedResourceError:
        """The error to raise for a failure: the stream broken by it, unless it was closed
        meanwhile (then it stays closed, and says so)."""
        if self._state == "closed":
            return trio.ClosedResourceError("this connection was closed")
        self._state = "broken"
        return trio.BrokenResourceError(words)

    def _closed_meanwhile(self) -> None:
        """After a wait: the descriptor is not ours any more once closed (it may be reused)."""
        if self._state == "closed":
            raise trio.ClosedResourceError("this connection was closed")

    async def _recv_raw(self, max_bytes: int = RECEIVE_BYTES) -> bytes:
        """The socket's next bytes, at most `max_bytes` (b"": its end), waiting only when it
        has none."""
        while True:
            try:
                return os.read(self.fd, max_bytes)
            except BlockingIOError:
                self._read_waited = True
                await trio.lowlevel.wait_readable(self.fd)
                self._closed_meanwhile()
            except OSError as exc:
                raise self._failure(f"the connection failed ({exc})") from exc

    async def _send_raw(self, data: bytes) -> None:
        """`data` written whole, waiting while the socket's buffer is full; a send cancelled
        midway leaves the stream broken (part of a record may have gone)."""
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(self.fd, view) :]
                except BlockingIOError:
                    self._write_waited = True
                    await trio.lowlevel.wait_writable(self.fd)
                    self._closed_meanwhile()
        except OSError as exc:
            raise self._failure(f"the connection failed ({exc})") from exc
        except BaseException:
            if view and self._state == "open":
                self._state = "broken"
            raise

    def _outgoing(self) -> bytes:
        """What TLS wrote and was not sent yet, in order."""
        data = self._out.read()
        if self._carry:
            data, self._carry = self._carry + data, b""
        return data

    def _flush_now(self) -> None:
        """Send what TLS wrote during a read (an alert, a KeyUpdate's answer) as far as the
        socket takes it without waiting; the rest goes first in the next send. A send under
        way sends it after its own bytes instead (its record is not cut)."""
        if self._sending or self._state == "closed":
            return
        data = self._outgoing()
        try:
            sent = os.write(self.fd, data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the connection failed: the next read or send says so
        self._carry = data[sent:]

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next plain bytes (at most `max_bytes`, `RECEIVE_BYTES` when None; b"": the
        peer ended the stream).

        Raises:
            ValueError: `max_bytes` is less than 1 (trio's `ReceiveStream.receive_some`).
        """
        if max_bytes is None:
            max_bytes = RECEIVE_BYTES
        elif max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        self._check()
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this connection")
        await trio.lowlevel.checkpoint_if_cancelled()
        self._receiving = True
        self._read_waited = False
        try:
            if self._tls is None:
                data = await self._recv_raw(min(max_bytes, RECEIVE_BYTES))
            else:
                data = await self._receive_tls(self._tls, max_bytes)
            if not self._read_waited:  # trio's rule: every call a checkpoint
                await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        finally:
            self._receiving = False

    async def _receive_tls(self, tls: ssl.SSLObject, max_bytes: int) -> bytes:
        while True:
            try:
                return tls.read(max_bytes)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                return b""  # the peer's close_notify
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise self._failure(f"TLS failed ({exc})") from exc
            finally:
                if self._out.pending:
                    self._flush_now()
            data = await self._recv_raw()
            if not data:
                return b""  # HTTPS's rule: the end of the socket ends the stream
            self._in.write(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """`data` sent whole (encrypted first in TLS)."""
        self._check()
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this connection")
        await trio.lowlevel.checkpoint_if_cancelled()
        self._sending = True
        self._write_waited = False
        try:
            if self._tls is None:
                await self._send_raw(bytes(data))
            else:
                try:
                    self._tls.write(data)
                except (ssl.SSLError, ssl.CertificateError) as exc:
                    # a write wants a read only for a renegotiation
                    raise self._failure(f"TLS failed ({exc})") from exc
                await self._send_raw(self._outgoing())
                while self._out.pending:  # what a read's TLS wrote meanwhile
                    await self._send_raw(self._out.read())
            if not self._write_waited:  # trio's rule: every call a checkpoint
                await trio.lowlevel.cancel_shielded_checkpoint()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        """Until the socket takes bytes again."""
        self._check()
        await trio.lowlevel.wait_writable(self.fd)

    async def do_handshake(self) -> None:
        """The TLS handshake (nothing to do in plain TCP).

        Raises:
            trio.BrokenResourceError: it failed (a certificate not verified, a refusal, the
                peer gone); the cause is chained.
        """
        tls = self._tls
        while tls is not None:
            try:
                tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            except (ssl.SSLError, ssl.CertificateError) as exc:
                self._flush_now()  # the alert that says why, if the socket takes it
                raise self._failure(f"TLS handshake failed ({exc})") from exc
            out = self._out.read()
            if out:
                await self._send_raw(out)
            if done:
                return
            data = await self._recv_raw()
            if not data:
                raise self._failure("the peer closed the connection in the handshake")
            self._in.write(data)

    async def aclose(self) -> None:
        """Close it: in TLS a `close_notify` sent if the socket takes it at once, never
        waited for; then the socket closed."""
        if self._state != "closed":
            if self._tls is not None and self._state == "open" and not self._sending:
                # SSLWantReadError: the peer's close_notify, which is not awaited
                with contextlib.suppress(ssl.SSLError, ValueError):
                    self._tls.unwrap()
                with contextlib.suppress(OSError):
                    os.write(self.fd, self._outgoing())
            self._state = "closed"
        await self.tcp.aclose()


def lean_tls(
    tcp: trio.SocketStream, context: ssl.SSLContext | None, *, server_host: str | None = None
) -> LeanStream:
    """`tcp` as a `LeanStream`: plain when `context` is None, else in TLS through `context`,
    its handshake not done yet (`do_handshake`), as the client of `server_host` (its name
    checked as `context` asks) or, when that is None, as the server."""
    if context is None:
        return LeanStream(tcp)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server_host is None
    tls = context.wrap_bio(incoming, outgoing, server_side, server_host)
    return LeanStream(tcp, tls, incoming, outgoing)


async def connect_tls(
    tcp: trio.SocketStream, context: ssl.SSLContext | None, host: str
) -> LeanStream:
    """`tcp` as a `LeanStream` (`lean_tls`), in TLS through `context` with its handshake done
    and `host` checked as `context` asks, or plain when `context` is None.

    Raises:
        trio.BrokenResourceError: the handshake failed (`tcp` is closed then).
    """
    lean = lean_tls(tcp, context, server_host=host)
    try:
        await lean.do_handshake()
    except BaseException:
        await trio.aclose_forcefully(lean)
        raise
    return lean


def server_tls(tcp: trio.abc.Stream, context: ssl.SSLContext) -> LeanStream | trio.SSLStream[Any]:
    """The server's TLS over an accepted `tcp`, its handshake not done yet: a `LeanStream`
    over a socket, `trio.SSLStream` over any other stream (the tests' memory streams)."""
    if isinstance(tcp, trio.SocketStream):
        return lean_tls(tcp, context)
    return trio.SSLStream(tcp, context, server_side=True, https_compatible=True)
