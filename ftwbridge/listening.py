"""What every accept loop of the bridge shares, below the rooms that own a listener (the edge's
hypercorn listeners, the door's own, the internal one): the peer's address of a stream, a
refusal said without waiting, a read that waits for bytes before it asks for them, and a
listener whose accept survives a full file table in one sentence (docs/operations.md, "Limits that strangers cannot fill", "When accept fails").
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from typing import Final

import trio

log = logging.getLogger("ftwbridge.listeners")

ACCEPT_RETRY_S: Final = 0.1
"""How long an accept that failed for want of resources waits before it tries again, seconds
(trio's `serve_listeners` waits as long)."""
ACCEPT_LOG_S: Final = 10.0
"""At most one line per listener this often while its accepts keep failing, seconds."""
CAPACITY_ERRNOS: Final = {
    errno.EMFILE: "the process has as many files open as its limit allows (ulimit -n)",
    errno.ENFILE: "the machine has as many files open as its limit allows (fs.file-max)",
    errno.ENOMEM: "the kernel has no memory for another connection",
    errno.ENOBUFS: "the kernel has no buffers for another connection",
}
"""accept(2)'s errors that mean the process or the machine is out of a resource, not that one
peer did anything (the set trio's `serve_listeners` retries), and what each means."""
_DRAIN_READS: Final = 16
"""Reads of what a refused peer already sent, at most, before its socket closes."""


def peer_host(stream: trio.abc.Stream) -> str:
    """The peer's address (IPv4 or IPv6 text, no port) of an accepted stream: a
    `trio.SocketStream`, or TLS over one; "?" for any other stream or a socket whose peer is
    gone already."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    sock = getattr(stream, "socket", None)
    try:
        return "?" if sock is None else str(sock.getpeername()[0])
    except (OSError, IndexError, TypeError):
        return "?"


def say_at_once(stream: trio.abc.Stream, data: bytes) -> bool:
    """Write what the kernel takes of `data` now, then end our side (FIN) and read and drop
    what the peer sent already, all without waiting, so that the close that follows costs no
    more than a close alone and does not turn into a reset that would destroy the words
    (RFC 9112 section 9.6). Only a plain `trio.SocketStream` is written; TLS takes a
    handshake first, which costs more than a close (docs/operations.md). Whether all of
    `data` went out; the caller closes the stream either way."""
    if not isinstance(stream, trio.SocketStream):
        return False
    try:
        fd = stream.socket.fileno()
        sent = os.write(fd, data)  # the socket is non-blocking: this never waits
        stream.socket.shutdown(socket.SHUT_WR)
    except OSError:  # BlockingIOError (a full buffer), or the peer is gone
        return False
    with contextlib.suppress(OSError):  # BlockingIOError: nothing more was sent yet
        for _ in range(_DRAIN_READS):
            if not os.read(fd, 65536):
                break
    return sent == len(data)


async def receive_when_readable(stream: trio.abc.Stream, max_bytes: int) -> bytes | bytearray:
    """`stream.receive_some(max_bytes)` that waits for the socket to be readable first, then
    reads once: up to `max_bytes` bytes, b"" at the peer's end. trio's own read tries the
    socket first and waits only when that fails (`EAGAIN`, a Python exception raised and
    caught, then the wait, then the read again), which on a connection whose peer waits for
    our answer, every read after a request or a box's frame, is one syscall and one
    exception more per read. Both wait in the same scheduler turns; when bytes have come
    already, this costs an `epoll_ctl` more than trio's read (measured in docs/performance.md,
    "Kernel time per call"). Any stream but a plain `trio.SocketStream` is read by its own
    `receive_some`.

    Raises:
        trio.ClosedResourceError: the stream was closed before or during the wait.
        trio.BrokenResourceError: the socket failed (the peer reset it), as trio raises it.
    """
    if not isinstance(stream, trio.SocketStream):
        return await stream.receive_some(max_bytes)
    sock = stream.socket
    while True:
        if sock.fileno() == -1:
            raise trio.ClosedResourceError("the socket was already closed")
        await trio.lowlevel.wait_readable(sock)  # closed meanwhile: ClosedResourceError
        fd = sock.fileno()  # after the wait: a task of the same batch may have closed it
        if fd == -1:
            raise trio.ClosedResourceError("the socket was closed")
        try:
            return os.read(fd, max_bytes)  # non-blocking: never waits
        except BlockingIOError:
            continue  # woken with nothing to read after all
        except OSError as exc:  # trio's own translation of a read's errors
            if exc.errno == errno.EBADF:
                raise trio.ClosedResourceError("the socket was closed") from None
            raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc


def http_refusal(
    status: int, reason: str, retry_after_s: int | None, body: bytes, kind: str
) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection: `status` `reason`, `Retry-After`
    (seconds, RFC 9110 section 10.2.3; None: no such header), `body` of content type `kind`."""
    retry = "" if retry_after_s is None else f"retry-after: {retry_after_s}\r\n"
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\n"
        f"{retry}connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class AcceptFailures:
    """What one listener says while accept(2) fails for want of resources (sans-I/O: `now`
    is monotonic seconds): the first failure at once, then at most one line per
    `ACCEPT_LOG_S` with the count since the last, and one line when accepts work again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failed = 0
        """Failed accepts so far (they only grow)."""
        self._since: float | None = None  # the first failure of the present spell
        self._said_at = 0.0
        self._unsaid = 0

    def fail(self, now: float, code: int) -> str | None:
        """A failure with errno `code` at `now`: the line to log, or None (counted)."""
        self.failed += 1
        why = CAPACITY_ERRNOS.get(code, os.strerror(code))
        name = errno.errorcode.get(code, str(code))
        if self._since is None:
            self._since, self._said_at, self._unsaid = now, now, 0
            return (
                f"{self.name} cannot accept connections: {why} ({name}); it"
                f" tries again every {ACCEPT_RETRY_S:g} s and says so at most every"
                f" {ACCEPT_LOG_S:g} s"
            )
        self._unsaid += 1
        if now - self._said_at < ACCEPT_LOG_S:
            return None
        count, self._unsaid, self._said_at = self._unsaid, 0, now
        return (
            f"{self.name} still cannot accept connections: {why} ({name});"
            f" {count} failed accepts since its last line, for {now - self._since:.0f} s now"
        )

    def accepted(self, now: float) -> str | None:
        """An accept worked at `now`: the line that ends a spell of failures, or None."""
        if self._since is None:
            return None
        took, self._since = now - self._since, None
        return f"{self.name} accepts connections again after {took:.1f} s"


class PatientListener(trio.abc.Listener[trio.abc.Stream]):
    """`listener`, whose accept waits out a failure for want of resources (`CAPACITY_ERRNOS`)
    by itself, `ACCEPT_RETRY_S` at a time, logging sentences (`AcceptFailures`) where
    trio's `serve_listeners` would log a traceback ten times a second. Other errors are
    raised as `listener` raises them.

    Args:
        listener: the listener wrapped (a `trio.SocketListener`).
        name: the listener in the lines, e.g. `the door's listener on 0.0.0.0:8783`.
    """

    def __init__(self, listener: trio.abc.Listener[trio.abc.Stream], name: str) -> None:
        self.listener = listener
        self.failures = AcceptFailures(name)

    async def accept(self) -> trio.abc.Stream:
        """The next connection (see the class)."""
        while True:
            try:
                stream = await self.listener.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                line = self.failures.fail(trio.current_time(), exc.errno)
                if line is not None:
                    log.error("%s", line)
                await trio.sleep(ACCEPT_RETRY_S)
                continue
            line = self.failures.accepted(trio.current_time())
            if line is not None:
                log.warning("%s", line)
            return stream

    async def aclose(self) -> None:
        """Close the wrapped listener."""
        await self.listener.aclose()
