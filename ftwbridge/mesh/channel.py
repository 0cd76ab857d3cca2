"""The forward's channel to other instances: HTTP/1.1 on long-lived, pooled connections
(`lean.LeanStream`: the socket read and written as it is, TLS by the standard library's
`ssl.SSLObject`), over TLS when the holder's URL is `https://` (`mesh/tls.py`), instead of a
general HTTP client (docs/performance.md, "The cluster hop": it does a request and its answer
in about a third of the instructions). The request's head is written here in one checked pass; a whole answer is
read by `answer.AnswerReader`, which takes only the shape the internal listener sends (framed
by its `Content-Length`), and a streamed one by h11 (sans-I/O).

`HopClient.request` sends one request whole (head and body in one send) and reads its answer
whole; `HopClient.stream` sends one and yields the answer's pieces as they come (a forwarded
listen stream; that connection is never pooled). The one distinction the forward's rules need
is kept exact:

- `NotReached`: nothing was sent. The holder could not be connected to within `CONNECT_S`
  (refused, no route, TLS handshake refused), or `POOL_CONNECTIONS` forwards are under way.
- `Lost`: the request went out (or may have), then the connection failed, was closed, timed
  out reading a stream, or answered what is not HTTP/1.1: the caller never sends it again.

A pooled connection is reused only while idle for less than `idle_s` (half the holder's
keep-alive) and while nothing can be read from it, from its socket nor, over TLS, from what
the TLS layer took off it (`mesh/lean.py`): a holder that closed it idle has sent its FIN,
which would make a request on it `Lost`; bytes past an answer would be read as the next one.
"""

from __future__ import annotations

import re
import select
import ssl
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11
import trio

from .answer import AnswerReader, Malformed, ReadAnswer, TooLarge
from .lean import LeanStream, connect_tls

CONNECT_S = 2.0
"""The longest a forward waits to connect to the holder (or for a free slot), s."""
POOL_CONNECTIONS = 64
"""Forwards under way at once at most, all holders together; as many idle ones are kept."""
RECEIVE_BYTES = 65_536
"""The most read from a connection at once, bytes."""
ANSWER_MAX_BYTES = 16 * 1024 * 1024
"""The largest answer `request` reads, bytes (16 MiB); a larger one is `Lost`."""


class NotReached(Exception):
    """The holder was not reached: nothing was sent (the words say why)."""


class Lost(Exception):
    """The request went out (or may have), then the holder's answer failed (the words say
    how): it must never be sent again."""


@dataclass(slots=True)
class Answer:
    """A holder's answer: `status`, `headers` (lower-case names, in order) and `body`."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""


@dataclass(slots=True)
class StreamAnswer:
    """A streamed answer's head; `chunks()` yields its body's pieces as they come."""

    status: int
    headers: list[tuple[str, str]]
    _conn: _Conn = field(repr=False)
    _read_s: float = field(repr=False)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's pieces until it ends.

        Raises:
            Lost: the connection failed, or nothing came for the stream's `read_s`.
        """
        while True:
            event = await self._conn.next_event(self._read_s)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return


@dataclass(slots=True)
class _Origin:
    https: bool
    host: str
    port: int
    authority: str


class _Conn:
    """One connection to a holder: its stream (`lean.LeanStream`), whether it may carry
    another request, when it became idle, and the h11 state of a streamed answer (`stream`
    only)."""

    __slots__ = ("eof", "fd", "h11", "idle_since", "keep", "stream")

    def __init__(self, stream: LeanStream) -> None:
        self.stream = stream
        self.h11: h11.Connection | None = None
        self.fd = stream.fd
        self.idle_since = 0.0
        self.eof = False
        self.keep = False

    def dead(self) -> bool:
        """Whether the holder closed it or sent anything past its last answer: held by the
        TLS layer (`LeanStream.holds_more`), or readable on the socket (`poll`, not
        `select`, which refuses descriptors past 1023)."""
        if self.stream.holds_more():
            return True
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLPRI)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    async def receive(self, read_s: float | None = None) -> bytes:
        """The next bytes read (b"": the holder closed its side), within `read_s`.

        Raises:
            Lost: the connection failed, or nothing came within `read_s`.
        """
        try:
            if read_s is None:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            else:
                with trio.fail_after(read_s):
                    data = await self.stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, OSError) as exc:
            raise Lost(f"the connection failed ({type(exc).__name__})") from exc
        except trio.TooSlowError:
            raise Lost(f"nothing came for {read_s} s") from None
        self.eof = not data
        return bytes(data)

    async def answer(self) -> ReadAnswer:
        """The whole answer to the request sent (`answer.AnswerReader`), the body within
        `ANSWER_MAX_BYTES`; `keep` is set when the connection may carry another.

        Raises:
            Lost: the connection failed or closed first, or sent what is not such an answer.
        """
        reader = AnswerReader(ANSWER_MAX_BYTES)
        while True:
            data = await self.receive()
            if not data:
                raise Lost("the holder closed the connection before its answer ended")
            try:
                got = reader.feed(data)
            except TooLarge as exc:
                raise Lost(str(exc)) from None
            except Malformed as exc:
                raise Lost(f"the holder's answer is not HTTP/1.1 as read here ({exc})") from None
            if got is not None:
                self.keep = got.keep
                return got

    async def next_event(self, read_s: float | None = None) -> object:
        """The next event of a streamed answer (h11), reading as needed (each read within
        `read_s`).

        Raises:
            Lost: the connection failed, closed, or sent what is not an HTTP/1.1 answer.
        """
        assert self.h11 is not None
        while True:
            try:
                event = self.h11.next_event()
                if event is not h11.NEED_DATA:
                    if isinstance(event, h11.ConnectionClosed):
                        raise Lost("the holder closed the connection before its answer ended")
                    return event
                self.h11.receive_data(await self.receive(read_s))
            except h11.RemoteProtocolError as exc:
                if self.eof:
                    raise Lost("the holder closed the connection before its answer ended") from exc
                raise Lost(f"the holder's answer is not HTTP/1.1 ({exc})") from exc


class HopClient:
    """HTTP/1.1 to other instances on pooled connections (see the module).

    Args:
        idle_s: a pooled connection idle this long (seconds) is closed, never reused: half
            the holders' `keep_alive_s`, so a request never crosses the holder's idle close.
        tls: the TLS client context for `https://` holders (`tls.client_context`: the
            cluster's CA); None: the system's CAs.
        connect_s: see `CONNECT_S` (seconds).
        max_connections: see `POOL_CONNECTIONS`.
    """

    def __init__(
        self,
        *,
        idle_s: float,
        tls: ssl.SSLContext | None = None,
        connect_s: float = CONNECT_S,
        max_connections: int = POOL_CONNECTIONS,
    ) -> None:
        self._idle_s = idle_s
        self._tls = tls
        self._connect_s = connect_s
        self._slots = trio.Semaphore(max_connections)
        self._max_idle = max_connections  # also the most under way at once
        self._idle: dict[str, list[_Conn]] = {}
        self._origins: dict[str, _Origin] = {}
        self.connections = 0
        """Connections made so far (a counter that only grows)."""

    def _origin(self, url: str) -> _Origin:
        origin = self._origins.get(url)
        if origin is None:
            parts = urlsplit(url)
            https = parts.scheme == "https"
            port = parts.port or (443 if https else 80)
            origin = _Origin(https, parts.hostname or "", port, parts.netloc)
            self._origins[url] = origin
        return origin

    async def _connect(self, origin: _Origin) -> _Conn:
        """A new connection to `origin`.

        Raises:
            NotReached: not connected within `connect_s`.
        """
        try:
            with trio.fail_after(self._connect_s):
                tcp = await trio.open_tcp_stream(origin.host, origin.port)
                context = None
                if origin.https:
                    context = self._tls or ssl.create_default_context()
                stream = await connect_tls(tcp, context, origin.host)
        except trio.TooSlowError:
            raise NotReached(f"no connection within {self._connect_s} s") from None
        except (OSError, trio.BrokenResourceError) as exc:
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
            raise NotReached(f"connection refused or failed ({cause})") from exc
        self.connections += 1
        return _Conn(stream)

    async def _take(self, url: str, origin: _Origin) -> _Conn:
        now = trio.current_time()
        idle = self._idle.get(url)
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < self._idle_s and not conn.dead():
                return conn
            await trio.aclose_forcefully(conn.stream)
        return await self._connect(origin)

    async def _give_back(self, url: str, conn: _Conn) -> None:
        pooled = sum(len(v) for v in self._idle.values())
        if not conn.keep or pooled >= self._max_idle:
            await trio.aclose_forcefully(conn.stream)
            return
        conn.keep = False
        conn.idle_since = trio.current_time()
        self._idle.setdefault(url, []).append(conn)

    async def _send(
        self, url: str, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> _Conn:
        """Send the request whole on a connection of the pool (or a new one).

        Raises:
            NotReached: see `NotReached` (nothing was sent).
            Lost: see `Lost`.
        """
        origin = self._origin(url)
        # one check of every header instead of h11's per-header expressions
        head = _request_head(method, path, origin.authority, headers, len(body))
        conn = await self._take(url, origin)
        try:
            await conn.stream.send_all(head + body)
        except BaseException as exc:
            await trio.aclose_forcefully(conn.stream)
            if isinstance(exc, (trio.BrokenResourceError, OSError)):
                raise Lost(f"the connection failed ({type(exc).__name__})") from exc
            raise
        return conn

    async def request(
        self, url: str, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> Answer:
        """Send `method path` with `headers` and `body` to the instance at `url` (scheme, host
        and port) and return its whole answer (framed by its `Content-Length`, as the
        internal listener frames every whole answer: `mesh/answer.py`). The caller's cancel
        scope bounds it.

        Raises:
            NotReached: see `NotReached` (nothing was sent).
            Lost: see `Lost` (never send it again).
        """
        try:
            self._slots.acquire_nowait()  # a free slot without a turn of the scheduler
        except trio.WouldBlock:
            try:
                with trio.fail_after(self._connect_s):
                    await self._slots.acquire()
            except trio.TooSlowError:
                raise NotReached(f"{self._max_idle} forwards under way already") from None
        try:
            conn = await self._send(url, method, path, headers, body)
            try:
                got = await conn.answer()
            except BaseException:
                await trio.aclose_forcefully(conn.stream)
                raise
            await self._give_back(url, conn)
            return Answer(got.status, got.headers, got.body)
        finally:
            self._slots.release()

    @asynccontextmanager
    async def stream(
        self,
        url: str,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        *,
        read_s: float,
    ) -> AsyncIterator[StreamAnswer]:
        """As `request`, but yields the answer's head once it comes and its body as it comes
        (the head's reads and `StreamAnswer.chunks`'s, each within `read_s` seconds;
        HTTP/1.1 by h11, chunked or not); the connection is closed when the block ends, never pooled.

        Raises:
            NotReached: see `NotReached` (nothing was sent).
            Lost: see `Lost` (never send it again).
        """
        conn = await self._send(url, method, path, headers, body)
        try:
            # h11 keeps the answer's state: told of the request sent above (its own bytes,
            # the same request's, are dropped)
            conn.h11 = h11.Connection(h11.CLIENT)
            frame = [("host", self._origin(url).authority), ("content-length", str(len(body)))]
            conn.h11.send(h11.Request(method=method, target=path, headers=frame))
            conn.h11.send(h11.Data(data=body))
            conn.h11.send(h11.EndOfMessage())
            while not isinstance(event := await conn.next_event(read_s), h11.Response):
                pass
            yield StreamAnswer(event.status_code, _decoded(event.headers), conn, read_s)
        finally:
            await trio.aclose_forcefully(conn.stream)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                await trio.aclose_forcefully(conn.stream)


def _request_head(
    method: str, path: str, authority: str, headers: list[tuple[str, str]], length: int
) -> bytes:
    """The request's head (RFC 9112 section 3: request line, `Host`, `Content-Length`, then
    `headers`, each `name: value`).

    Raises:
        NotReached: a name or value no HTTP/1.1 request may carry (a CR, LF or NUL anywhere, a
            colon or space in a name, an empty name, or a character beyond Latin-1).
    """
    names = [name for name, _ in headers]
    values = "".join(value for _, value in headers)
    if not all(names) or _BAD_NAME.search("".join(names)) or _BAD_VALUE.search(values):
        raise NotReached("the request cannot be sent (a header no HTTP/1.1 request may carry)")
    lines = [f"{method} {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: {length}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers]
    lines.append("\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        raise NotReached("the request cannot be sent (a header beyond Latin-1)") from None


_BAD_NAME = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
"""Not a `tchar` (RFC 9110 section 5.6.2): never in a field name."""
_BAD_VALUE = re.compile(r"[\r\n\0]")
"""Never in a field value (RFC 9110 section 5.5)."""


def _decoded(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
