"""The internal listener's HTTP/1.1, sans-I/O: one connection's state, bytes in, requests and
bytes out (docs/operations.md, "The internal listener").

`HolderWire` reads each request of the channel's plain shape itself (`heads.lean_head`) and
any other with an `h11.Connection` of the server's role, and adds what the listener bounds:
a request head within `MAX_HEAD_BYTES` (past it 431) and `head_s` of its first byte (408); a
body within `max_body_bytes` (413, on the declared `Content-Length` before a byte of it, or
as it comes) and `body_s` of the head (408); a connection kept alive between requests for
`idle_s` (then closed without a word, RFC 9112 section 9.8). It does no I/O and reads no
clock: the shell passes `now` (trio time, s) with what it feeds, asks `wake_at()` when its
wait ends, and calls `timed_out()` when that moment has come (aioquic's timer style).

`next_event()` returns `NEED_DATA`, `CLOSE` (the peer left, or stayed idle too long: close
without a word), a whole `Request` (head and body), or a `Refusal` whose bytes (`refuse`)
are the connection's last words. Bytes that are not HTTP/1.1 (RFC 9112; h11 decides) are a
`Refusal` with `fault` set, answered in HTTP's form, and only that connection closes. Answers
are written here, whole (`answer`) or as a chunked stream (`stream_head`, `stream_piece`,
`stream_end`); `next_cycle` says whether the connection is kept for the next request."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import h11

from .heads import LEAN_HEAD_BYTES, REASONS, LeanHead, answer_head, lean_head

MAX_HEAD_BYTES: Final = 32 * 1024
"""The largest request head taken, bytes: the main listener's 16 KiB and the mesh's headers,
with room to spare; past it: 431."""
HEAD_S: Final = 10.0
"""From a request's first byte (a new connection's: from its accept) to its whole head, s."""
MCP_PATH: Final = "/mcp"
JSONRPC_INVALID_REQUEST: Final = -32600
"""JSON-RPC 2.0's "Invalid Request" (jsonrpc.org/specification, section 5.1)."""


class Phase(StrEnum):
    """Where one connection is (each bound counts from the phase's start)."""

    IDLE = "idle"
    """No byte of the next request yet: bound `idle_s` (a new connection's: `head_s`)."""
    HEAD = "head"
    """Part of a request head: bound `head_s`."""
    BODY = "body"
    """The head whole, its body under way: bound `body_s`."""
    ANSWER = "answer"
    """The request whole, its answer being made or sent: no bound here."""
    CLOSED = "closed"
    """Done: the shell closes the socket."""


class _Sentinel(StrEnum):
    NEED_DATA = "need_data"
    CLOSE = "close"


NEED_DATA: Final = _Sentinel.NEED_DATA
"""Feed more bytes (`receive_data`) before the next event."""
CLOSE: Final = _Sentinel.CLOSE
"""Close the connection without a word (the peer left, or it stayed idle past `idle_s`)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One whole request: `method`, `path` (the target without its query), `headers`
    (lower-case name -> every value, Latin-1) and `body`."""

    method: str
    path: str
    headers: dict[str, list[str]]
    body: bytes


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer that ends the connection: `status`, `words`; `fault` when the peer's bytes
    broke HTTP/1.1 (a connection fault, counted)."""

    status: int
    words: str
    fault: bool = False


Event = Request | Refusal | _Sentinel


def refusal_body(words: str, path: str | None) -> bytes:
    """A refusal's JSON body: a JSON-RPC error for `/mcp` (id null, -32600), else
    `{"error": words}`."""
    if path == MCP_PATH:
        error = {"code": JSONRPC_INVALID_REQUEST, "message": words}
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    return json.dumps({"error": words}).encode()


def refusal_bytes(status: int, words: str, path: str | None) -> bytes:
    """The whole answer of a refusal (`refusal_body`), with `Connection: close`."""
    body = refusal_body(words, path)
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class HolderWire:
    """One connection of the internal listener (see the module).

    Each request is read by `heads.lean_head` when it has the channel's plain shape, else
    by h11 (a fresh `h11.Connection` for that request, given every byte of it): the same
    requests are taken and refused either way. Answers are written here.

    Args:
        now: the accept's time (trio time, s).
        max_body_bytes: the largest request body, bytes (past it: 413).
        body_s: from a whole head to its whole body, s (past it: 408).
        idle_s: a kept-alive connection with no request this long is closed, s.
        head_s: from a request's first byte to its whole head, s (past it: 408).
    """

    __slots__ = (
        "_body",
        "_buf",
        "_closing",
        "_eof",
        "_fed",
        "_fields",
        "_first",
        "_h",
        "_lean",
        "_limits",
        "_method",
        "_now",
        "_out",
        "_seen",
        "_size",
        "_target",
        "phase",
    )

    def __init__(
        self, *, now: float, max_body_bytes: int, body_s: float, idle_s: float, head_s: float
    ) -> None:
        self._h: h11.Connection | None = None  # a request not of the plain shape: h11's
        self._buf = bytearray()  # the request's bytes (and after) while h11 has none
        self._seen = 0  # where the search for the head's end goes on from in `_buf`
        self._lean: LeanHead | None = None
        self._limits = (max_body_bytes, head_s, body_s, idle_s)
        self.phase = Phase.IDLE
        self._now = now  # when the phase began
        self._fed = now  # when bytes were last fed
        self._first = True
        self._eof = False
        self._method: bytes | None = None
        self._target = b""
        self._fields: dict[str, list[str]] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._out = b""
        self._closing = False

    @property
    def path(self) -> str | None:
        """The path of the request under way (None before its head)."""
        return None if self._method is None else _path(self._target)

    def receive_data(self, data: bytes | bytearray, now: float) -> None:
        """Bytes read from the peer at `now` (b"": it closed its side)."""
        if not data:
            self._eof = True
        elif self.phase is Phase.IDLE:
            self.phase, self._now = Phase.HEAD, now
        self._fed = now
        if self._h is None:
            self._buf += data  # amortized: a peer that sends a byte at a time costs no copies
        else:
            self._h.receive_data(bytes(data))  # the same object when it is bytes already

    def data_to_send(self) -> bytes:
        """Bytes owed before more are read (a `100 Continue`), once."""
        out, self._out = self._out, b""
        return out

    def wake_at(self) -> float:
        """When the current wait ends (trio time, s; inf: none)."""
        _, head_s, body_s, idle_s = self._limits
        if self.phase is Phase.IDLE:
            return self._now + (head_s if self._first else idle_s)
        if self.phase is Phase.HEAD:
            return self._now + head_s
        if self.phase is Phase.BODY:
            return self._now + body_s
        return math.inf

    def timed_out(self) -> Event:
        """What the wait's end means: `CLOSE` when idle, else a 408 `Refusal`."""
        if self.phase is Phase.IDLE:
            return self._close()
        if self.phase is Phase.BODY:
            return Refusal(408, "Request body not received in time")
        return Refusal(408, "No whole request head in time.")

    def next_event(self) -> Event:
        """The next thing the shell must act on (see the module); raises nothing."""
        if self._h is None:
            event = self._lean_event()
            if event is not None:
                return event
        return self._h11_event()

    def _lean_event(self) -> Event | None:
        """The next event of a request read by `lean_head`; None once it is h11's."""
        buf = self._buf
        if self._lean is None:
            end = buf.find(b"\r\n\r\n", self._seen)
            if end < 0 and self._waits(buf):
                return NEED_DATA
            self._seen = 0
            lean = lean_head(bytes(buf[: end + 4])) if 0 <= end < LEAN_HEAD_BYTES else None
            if lean is None:  # not the plain shape: h11 reads it, from its first byte
                self._h = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
                self._h.receive_data(bytes(buf))
                if self._eof:
                    self._h.receive_data(b"")
                self._buf = bytearray()
                return None
            del buf[: end + 4]
            self._lean = lean
            self._method, self._target, self._fields = lean.method, lean.target, lean.fields
            self.phase, self._now = Phase.BODY, self._fed  # the body's time counts from here
            if lean.length > self._limits[0]:
                return Refusal(413, "Request body too large")
        if len(buf) < self._lean.length:
            return self._close() if self._eof else NEED_DATA
        self.phase = Phase.ANSWER
        body = bytes(buf[: self._lean.length])
        del buf[: self._lean.length]
        return Request(self._lean.method.decode("ascii"), _path(self._target), self._fields, body)

    def _waits(self, buf: bytearray) -> bool:
        """Whether a head with no CRLF end yet is still to be waited for here: within the
        lean bound, the peer still there, a first byte h11 does not refuse at once, and no
        end of bare LFs (h11 ends a head there too). Each search goes on from where the last
        stopped (`_seen`), so a head sent a byte at a time costs no search of it all again."""
        if len(buf) > LEAN_HEAD_BYTES or self._eof or (buf and buf[0] <= 0x20):
            return False
        if buf.find(b"\n\n", self._seen) >= 0 or buf.find(b"\n\r\n", self._seen) >= 0:
            return False
        self._seen = max(0, len(buf) - 3)
        return True

    def _h11_event(self) -> Event:
        assert self._h is not None
        while True:
            try:
                event = self._h.next_event()
            except h11.RemoteProtocolError as exc:
                if self._eof:
                    return self._close()
                return _malformed(exc.error_status_hint)
            if event is h11.NEED_DATA:
                if self._eof:
                    return self._close()
                return NEED_DATA
            if isinstance(event, h11.Request):
                refused = self._took_head(event)
                if refused is not None:
                    return refused
            elif isinstance(event, h11.Data):
                self._body.append(bytes(event.data))
                self._size += len(event.data)
                if self._size > self._limits[0]:
                    return Refusal(413, "Request body too large")
            elif isinstance(event, h11.EndOfMessage) and self._method is not None:
                self.phase = Phase.ANSWER
                body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
                self._body, self._size = [], 0
                return Request(
                    self._method.decode("ascii"), _path(self._target), self._fields, body
                )
            else:  # ConnectionClosed; PAUSED is never asked for (answers come first)
                return self._close()

    def _took_head(self, head: h11.Request) -> Refusal | None:
        assert self._h is not None
        self._method, self._target = head.method, head.target
        self.phase, self._now = Phase.BODY, self._fed  # the body's time counts from here
        # `raw_items`, h11's public list: iterating `head.headers` costs a call per header
        fields: dict[str, list[str]] = {}
        for name, value in head.headers.raw_items():
            fields.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        self._fields = fields
        lengths = fields.get("content-length", ())
        if lengths and "transfer-encoding" in fields:  # RFC 9112 s. 6.3
            return Refusal(400, "Both Content-Length and Transfer-Encoding: send one.", True)
        if any(int(length) > self._limits[0] for length in lengths):
            return Refusal(413, "Request body too large")
        if self._h.they_are_waiting_for_100_continue:  # only for a body that will be read
            self._out += self._h.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
        return None

    def _close(self) -> _Sentinel:
        self.phase = Phase.CLOSED
        return CLOSE

    def refuse(self, refusal: Refusal) -> bytes:
        """`refusal`'s bytes, the connection's last (it is `CLOSED` after them)."""
        self.phase = Phase.CLOSED
        return refusal_bytes(refusal.status, refusal.words, self.path)

    def _peer_keeps(self) -> bool:
        """Whether the peer lets the connection go on (RFC 9112 s. 9.3; h11 says if not plain)."""
        return self._h is None or self._h.their_state is h11.DONE

    def answer(self, status: int, headers: Mapping[str, str], body: bytes) -> bytes:
        """A whole answer's bytes, with its `Content-Length` (none for 204 and 304; no body
        bytes to a HEAD, RFC 9110 section 9.3.2). An answer of 400 or more says
        `Connection: close` and ends the connection (RFC 9112 section 9.6): a peer that has
        not proved the mesh key gets nothing else, so it cannot keep a connection open past
        its first request. So does one to a peer that asked to close (or spoke HTTP/1.0).

        Raises:
            ValueError: as `heads.answer_head` (a status not from 200 to 599, a control
                character in a value, a name that is not a token).
        """
        frame = [(k, v) for k, v in headers.items() if k.lower() not in _FRAMING]
        asked = any(k.lower() == "connection" and "close" in v.lower() for k, v in frame)
        closing = asked or status >= 400 or not self._peer_keeps()
        if closing and not any(k.lower() == "connection" for k, _v in frame):
            frame.append(("connection", "close"))
        if status not in (204, 304):
            frame.append(("content-length", str(len(body))))
        self._closing = closing
        if status in (204, 304) or self._method == b"HEAD":
            body = b""
        return answer_head(status, REASONS.get(status, ""), frame) + body

    def stream_head(self, status: int, headers: Mapping[str, str]) -> bytes:
        """A streamed answer's head (chunked: RFC 9112 section 7.1); the connection closes
        after the stream.

        Raises:
            ValueError: as `answer`.
        """
        frame = [(k, v) for k, v in headers.items() if k.lower() not in _FRAMING]
        if not any(k.lower() == "connection" for k, _v in frame):
            frame.append(("connection", "close"))
        frame.append(("transfer-encoding", "chunked"))
        return answer_head(status, REASONS.get(status, ""), frame)

    def stream_piece(self, data: bytes) -> bytes:
        """One piece of a streamed answer (nothing for b"": an empty chunk would end it)."""
        return b"%x\r\n%s\r\n" % (len(data), data) if data else b""

    def stream_end(self) -> bytes:
        """A streamed answer's last chunk; the connection is `CLOSED` after it."""
        self.phase = Phase.CLOSED
        return b"0\r\n\r\n"

    def next_cycle(self, now: float) -> bool:
        """After a whole answer at `now`: whether the connection is kept for the next request
        (both sides done, no `Connection: close` either way, RFC 9112 section 9.3); the bytes
        that came after this request begin the next."""
        if self._closing or not self._peer_keeps():
            self.phase = Phase.CLOSED
            return False
        if self._h is not None:
            trailing, _closed = self._h.trailing_data
            self._buf, self._h = bytearray(trailing), None
        self._lean, self._method, self._target, self._fields = None, None, b"", {}
        self._first = False
        self.phase, self._now = Phase.IDLE, now
        if self._buf:  # a pipelined request's first bytes are here already
            self.phase = Phase.HEAD
        return True


_FRAMING = frozenset({"content-length", "transfer-encoding"})
"""Set by the wire itself, never taken from an answer's headers (in any case of letters)."""


def _path(target: bytes) -> str:
    return target.split(b"?", 1)[0].decode("latin-1")


def _malformed(status: int) -> Refusal:
    if status == 431:
        return Refusal(431, f"The request head is larger than {MAX_HEAD_BYTES} bytes.", True)
    return Refusal(status, "A malformed HTTP/1.1 request (RFC 9112).", True)
