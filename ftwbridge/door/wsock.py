"""One box's WebSocket on a trio stream, after the opening handshake (RFC 6455 sections 5-7).

`LeanSocket` is the door's `tunnel.WebSocketLike` over wsproto's sans-I/O `Connection`: one
reader (the uplink's own task, in `receive`), and sends written straight to the stream under
one lock that a free send takes without a scheduler turn. It answers pings, keeps messages to
`max_message` bytes (past it: Close 1009, RFC 6455 section 7.4.1), fails a frame wsproto cannot
parse with Close 1002 (its `ParseFailed` code: 1007 for text that is not UTF-8), closes a
connection silent for `silence_s`, and after either side's Close waits at most `CLOSE_REPLY_S`
for the other's before the TCP connection closes (section 7.1.1: the server closes it; a Close
that fails the connection, 1002, 1009 or the door's 44xx, waits `LAST_WORDS_S`, reading and
dropping what still comes). Pings and those bounds are kept by `watch`, one task beside the
reader.

The read side cuts the stream into frames itself (RFC 6455 section 5.2: only the head's
lengths are read) and takes the frame a box sends nearly always, one whole binary message
(FIN set, no RSV bits, opcode 2, masked, its length in the fewest bytes and within
`max_message`, outside a fragmented message), unmasking it here (section 5.3); only such a
frame is kept until all of it has come. Every other frame goes to wsproto byte for byte as
it comes, from its first byte on, so a head that breaks a rule is judged at once, and the
reader cuts again after its last byte: wsproto's buffer is empty at each fast frame.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from typing import Final

import trio
from wsproto.connection import Connection, ConnectionState
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage

from ftwbridge.edgerules import CLOSE_REPLY_S, FAILING_CODES, LAST_WORDS_S
from ftwbridge.listening import receive_when_readable

log = logging.getLogger("ftwbridge.door")
RECV_BYTES: Final = 65536
"""The most one read takes from the socket."""
CLOSE_TOO_BIG: Final = 1009
WHOLE_BINARY: Final = 0x82
"""A frame's first byte for one whole binary message: FIN, no RSV bits, opcode 2."""
_AFTER_THEIR_CLOSE: Final = (ConnectionState.REMOTE_CLOSING, ConnectionState.CLOSED)
CHECKPOINT_FRAMES: Final = 64
"""After this many frames judged by wsproto in one read, the reader lets others run."""
SEND_S: Final = 1.0
"""The most one write may take once started (a peer that reads nothing is let go), seconds."""


class BoxGone(trio.ClosedResourceError):
    """The box's WebSocket has ended (either side's Close, the TCP connection, or a fault)."""


class LeanSocket:
    """The door's side of one upgraded connection (`door.tunnel.WebSocketLike`).

    Args:
        stream: the TCP stream after the 101.
        connection: wsproto's server `Connection`, fed nothing yet.
        remote_addr: the box's address as the door's limits key it.
        silence_s: a connection that sends nothing (pongs included) this long is closed, s.
        max_message: the largest message taken, bytes.
        initial: the bytes that came after the request head (the first frames' start).

    `receive()` returns one whole message (bytes, or str for text) and raises `BoxGone` once
    the WebSocket has ended; `send(data)` writes one binary message and raises `BoxGone` after a
    close; `close(code, reason)` sends one Close (`BoxGone` if one went already).
    """

    __slots__ = (
        "_buf",
        "_conn",
        "_deadline",
        "_ended",
        "_initial",
        "_lock",
        "_messages",
        "_midway",
        "_owed",
        "_parts",
        "_sent",
        "_size",
        "_stream",
        "_streaming",
        "_wake",
        "closed",
        "fault",
        "last_rx",
        "max_message",
        "remote_addr",
        "silence_s",
    )

    def __init__(
        self,
        stream: trio.abc.Stream,
        connection: Connection,
        remote_addr: str,
        *,
        silence_s: float,
        max_message: int,
        initial: bytes = b"",
    ) -> None:
        self._stream = stream
        self._conn = connection
        self.remote_addr = remote_addr
        self.silence_s = silence_s
        self.max_message = max_message
        self._lock = trio.StrictFIFOLock()  # writes go out in the order they were asked for
        self._messages: deque[str | bytes] = deque()
        self._parts: list[bytes | bytearray | str] = []
        self._size = 0
        self._deadline = math.inf
        """When `watch` stops waiting for the peer's Close (after ours), trio time."""
        self._ended = False
        self._initial = initial
        self._buf = bytearray()
        """Bytes read and not yet a whole frame."""
        self._midway = False
        """wsproto holds the start of a fragmented message: its frames all go there."""
        self._streaming = False
        """A frame too big to hold came: every byte goes to wsproto as it comes."""
        self._owed = 0
        """Bytes still to come of the frame wsproto has the start of: passed on as they come."""
        self._sent = 0
        """Bytes at the start of `_buf` wsproto has already: a head not yet whole."""
        self._wake = trio.CancelScope()
        self.last_rx = trio.current_time()
        """When bytes last came, trio time (the silence rule, `watch`)."""
        self.closed = False
        """A Close went out or came in: no more messages either way."""
        self.fault: str | None = None
        """What the peer broke (RFC 6455 words), for the listener's fault count."""

    async def receive(self) -> str | bytes:
        """The next whole message. Raises `BoxGone` once the WebSocket has ended."""
        while not self._messages:
            if self.closed:
                raise BoxGone("the box's WebSocket is closed")
            await self._read_once()
        return self._messages.popleft()

    async def send(self, data: bytes) -> None:
        """Send one binary message. Raises `BoxGone` after a close, `trio.BrokenResourceError`
        when the peer is gone or took nothing for `SEND_S`."""
        if self.closed:
            raise BoxGone("the box's WebSocket is closed")
        await self.write(self._conn.send(Message(data=data)))

    async def close(self, code: int, reason: str = "") -> None:
        """Send a Close with `code` (RFC 6455 section 7.4) once; the reader then waits at most
        `CLOSE_REPLY_S` for the box's (`LAST_WORDS_S` when `code` fails the connection).
        Raises `BoxGone` if a Close went already (`tunnel.close_ws` treats that as done)."""
        if self.closed or self._conn.state not in (
            ConnectionState.OPEN,
            ConnectionState.REMOTE_CLOSING,
        ):
            raise BoxGone("the box's WebSocket is closed")
        self.closed = True
        wait_s = LAST_WORDS_S if code in FAILING_CODES else CLOSE_REPLY_S
        self._deadline = min(self._deadline, trio.current_time() + wait_s)
        self._wake.cancel()  # `watch` looks at the new deadline
        await self.write(self._conn.send(CloseConnection(code=code, reason=reason)))

    async def ping(self) -> None:
        """Send a Ping (RFC 6455 section 5.5.2) while the WebSocket is open: its Pong keeps
        the connection from being silent. Raises as `write`."""
        if not self.closed and self._conn.state is ConnectionState.OPEN:
            await self.write(self._conn.send(Ping()))

    async def write(self, data: bytes) -> None:
        """Write `data` whole: a free lock taken without a scheduler turn, the write shielded
        (a write cut midway would break the stream) and bounded by `SEND_S`.

        Raises:
            trio.BrokenResourceError: the peer is gone, or took nothing in time (then the
                stream is closed, which ends the reader too).
            trio.ClosedResourceError: the stream was closed meanwhile.
        """
        lock = self._lock
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + SEND_S) as scope:
                await self._stream.send_all(data)
        finally:
            lock.release()
        if scope.cancelled_caught:
            self.closed = True
            await trio.aclose_forcefully(self._stream)
            raise trio.BrokenResourceError("the box took none of our bytes in time")

    async def drain(self) -> None:
        """After the uplink's end: wait for the peer's Close (until the reply deadline), so
        the TCP connection closes after it (RFC 6455 section 7.1.1)."""
        try:
            while self._conn.state is not ConnectionState.CLOSED and not self._ended:
                await self._read_once()
        except BoxGone:
            pass

    async def _read_once(self) -> None:
        """One read from the socket (first, the bytes that came with the request head), its
        frames taken, waiting for bytes before it asks (`listening.receive_when_readable`).
        The silence rule and the wait for a Close in reply are `watch`'s: it closes the
        stream, which ends this read."""
        if self._initial:
            initial, self._initial = self._initial, b""
            await self._feed(initial)
            return
        try:
            data = await receive_when_readable(self._stream, RECV_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self._gone()
            raise BoxGone("the box's TCP connection ended, was silent too long, or sent no Close")
        self.last_rx = trio.current_time()
        await self._feed(data)

    async def _feed(self, data: bytes | bytearray) -> None:
        """Take `data` read from the socket (see the module's words): the rest of a frame
        wsproto judges goes there at once, then frame after frame is cut; only the start of a
        frame the fast path may take is kept for the next read."""
        if self._streaming:
            self._conn.receive_data(bytes(data))
            await self._handle_events()
            return
        if self._owed:  # the rest of the frame wsproto has the start of
            take = min(self._owed, len(data))
            self._owed -= take
            self._conn.receive_data(bytes(data[:take]))
            await self._handle_events()
            if take == len(data) or self._ended or self._conn.state in _AFTER_THEIR_CLOSE:
                return
            data = data[take:]
        buf = self._buf
        buf += data
        pos, sent, self._sent, judged = 0, self._sent, 0, 0
        try:
            while pos < len(buf):
                got = _frame_head(buf, pos)
                if self._fast(buf, pos, got):
                    if got is None or pos + got[0] + got[1] > len(buf):
                        return  # kept whole until it has all come
                    end = pos + got[0] + got[1]
                    if not self.closed:
                        self._messages.append(_unmask(buf, end - got[1] - 4, end))
                    pos = end
                    continue
                if got is None:  # wsproto judges the head as it comes: it is kept to cut after
                    self._conn.receive_data(bytes(buf[pos + sent :]))
                    self._sent = len(buf) - pos
                    await self._handle_events()
                    return
                first, (head, size, _) = buf[pos], got
                self._streaming = size > self.max_message  # not held: all goes there from now
                stop = len(buf) if self._streaming else min(pos + head + size, len(buf))
                self._owed = pos + head + size - stop
                opcode = first & 0x0F
                if opcode in (1, 2) or (opcode == 0 and first & 0x80):
                    self._midway = not first & 0x80
                frame, pos, sent = bytes(buf[pos + sent : stop]), stop, 0
                self._conn.receive_data(frame)
                await self._handle_events()
                if self._ended or self._conn.state in _AFTER_THEIR_CLOSE:
                    pos = len(buf)  # the box's Close: nothing after it counts
                    return
                judged += 1
                if judged % CHECKPOINT_FRAMES == 0:
                    await trio.lowlevel.checkpoint()  # a read of many small frames lets others run
        finally:
            del buf[:pos]

    def _fast(self, buf: bytearray, pos: int, got: tuple[int, int, bool] | None) -> bool:
        """Whether the frame at `pos` may be the fast path's (`got` its `_frame_head`): first
        byte `WHOLE_BINARY` outside a fragmented message, masked, its length in the fewest
        bytes and within `max_message`, as far as its head has come."""
        if buf[pos] != WHOLE_BINARY or self._midway:
            return False
        if got is None:
            return len(buf) - pos < 2 or bool(buf[pos + 1] & 0x80)
        return bool(buf[pos + 1] & 0x80) and got[2] and got[1] <= self.max_message

    async def watch(self, ping_s: float) -> None:
        """Until the connection ends: a Ping every `ping_s` seconds, and the stream closed
        when nothing has come for `silence_s`, or when the wait for the box's Close after ours
        is over (`close`). Run beside the reader; cancel it when the uplink is done."""
        next_ping = trio.current_time() + ping_s
        while True:
            with trio.CancelScope() as self._wake:
                await trio.sleep_until(
                    min(self.last_rx + self.silence_s, self._deadline, next_ping)
                )
            now = trio.current_time()
            if now >= self._deadline or now >= self.last_rx + self.silence_s:
                self._gone()
                await trio.aclose_forcefully(self._stream)
                return
            if now >= next_ping:
                next_ping = now + ping_s
                try:
                    await self.ping()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return

    async def _handle_events(self) -> None:
        for event in self._conn.events():
            if isinstance(event, (BytesMessage, TextMessage)):
                if not self.closed:
                    await self._take(event)
            elif isinstance(event, Ping):
                if self._conn.state is ConnectionState.OPEN:
                    await self.write(self._conn.send(event.response()))
            elif isinstance(event, CloseConnection):
                await self._on_close(event)
                return

    async def _take(self, event: BytesMessage | TextMessage) -> None:
        self._size += len(event.data)
        if self._size > self.max_message:
            await self._fail(CLOSE_TOO_BIG, f"a message over {self.max_message} bytes")
            return
        if event.data:  # empty fragments are free to send: a list of them grew without bound
            self._parts.append(event.data)
        if event.message_finished and not self.closed:
            parts, self._parts, self._size = self._parts, [], 0
            if isinstance(event, TextMessage):
                self._messages.append("".join(str(p) for p in parts))
            else:
                self._messages.append(b"".join(p for p in parts if not isinstance(p, str)))

    async def _on_close(self, event: CloseConnection) -> None:
        """The peer's Close (state REMOTE_CLOSING or CLOSED), or a frame wsproto could not
        parse (state still OPEN, the event carrying the failing code)."""
        if self._conn.state is ConnectionState.OPEN:
            await self._fail(event.code, event.reason or "a frame that breaks RFC 6455")
            return
        was_closed, self.closed = self.closed, True
        if self._conn.state is ConnectionState.REMOTE_CLOSING and not was_closed:
            # section 5.5.1: answer with the same code
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.write(self._conn.send(event.response()))
        self._gone()

    async def _fail(self, code: int, why: str) -> None:
        """Fail the WebSocket (RFC 6455 section 7.1.7): a Close with `code`, then what the peer
        still sends is read and dropped (`drain`) for at most `LAST_WORDS_S`, so that closing
        with its bytes unread does not reset the connection before our Close is read."""
        self.fault = f"Close {code}: {why}"
        self.closed = True
        self._messages.clear()
        self._deadline = min(self._deadline, trio.current_time() + LAST_WORDS_S)
        self._wake.cancel()
        if self._conn.state is ConnectionState.OPEN:
            with trio.move_on_after(LAST_WORDS_S):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self.write(self._conn.send(CloseConnection(code=code)))
        raise BoxGone(self.fault)

    def _gone(self) -> None:
        self.closed = True
        self._ended = True


def _frame_head(buf: bytearray, pos: int) -> tuple[int, int, bool] | None:
    """The frame head at `pos` (RFC 6455 section 5.2): (its length with the masking key,
    the payload's length, whether that length took the fewest bytes), or None while its
    lengths have not all come (the masking key may be still to come)."""
    left = len(buf) - pos
    if left < 2:
        return None
    second = buf[pos + 1]
    size = second & 0x7F
    mask = 4 if second & 0x80 else 0
    if size < 126:
        return 2 + mask, size, True
    extra = 2 if size == 126 else 8
    if left < 2 + extra:
        return None
    size = int.from_bytes(buf[pos + 2 : pos + 2 + extra], "big")
    return 2 + extra + mask, size, size >= (126 if extra == 2 else 65536)


def _unmask(buf: bytearray, at: int, end: int) -> bytes:
    """The payload from `at + 4` to `end`, unmasked by the 4-byte key at `at` (section 5.3):
    every fourth byte XORed with the same key byte, through a translation table."""
    data = buf[at + 4 : end]
    data[0::4] = data[0::4].translate(_XOR[buf[at]])
    data[1::4] = data[1::4].translate(_XOR[buf[at + 1]])
    data[2::4] = data[2::4].translate(_XOR[buf[at + 2]])
    data[3::4] = data[3::4].translate(_XOR[buf[at + 3]])
    return bytes(data)


_XOR: Final = tuple(bytes(b ^ k for b in range(256)) for k in range(256))
"""`_XOR[k]` maps each byte to itself XOR `k` (`bytes.translate`), 64 KiB in all."""
