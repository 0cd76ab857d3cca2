"""A holder's whole answer to one forwarded request, read sans-I/O (RFC 9112): the lean
reader of the hop's channel (`mesh/channel.py`; docs/performance.md, "The cluster hop").

The channel's whole answers come from the internal listener of another instance
(`mesh/wire.HolderWire.answer`), which frames every one by its `Content-Length`. So this reader
takes that shape only, checked in full, in a few passes over the bytes instead of h11's
state machine and its expressions per header:

- a status line `HTTP/1.1 NNN reason` (or `HTTP/1.0`, whose connection is then not kept),
  with a final status (200 to 599; an interim 1xx is never asked for: no `Expect` is sent);
- header lines `name: value`, a name a token (RFC 9110 section 5.6.2), a value of visible
  characters, spaces and tabs (section 5.5), each line ended by CRLF, no line folded
  (RFC 9112 section 5.2), the head within `MAX_HEAD_BYTES`;
- a body of exactly one `Content-Length` (RFC 9112 section 6.3), within the reader's bound;
  204 and 304 have none, and a `Content-Length` they carry is checked all the same (one
  value of digits; on a 204 only 0, RFC 9110 section 8.6).

Anything else, `Transfer-Encoding` included, raises `Malformed`: the channel reads no other
shape (a streamed answer, `subscriptions/listen`, is read by h11 instead). Nothing here does
I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .heads import HEADER_LINE, LENGTH_DIGITS

MAX_HEAD_BYTES: Final = 32 * 1024
"""The largest answer head read, bytes (h11's default bound is 16 KiB)."""

_HEAD = re.compile(
    rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [\t \x21-\x7e\x80-\xff]*)?\r\n"
    rb"((?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t \x21-\x7e\x80-\xff]*\r\n)*)\r\n"
)
"""A whole head: the status line, then every header line, each as RFC 9112 section 4 and
RFC 9110 sections 5.5 and 5.6.2 allow (no CR, LF or NUL inside a line, no folded line)."""
_STRAY = re.compile(rb"(?<!\r)\n|\r[^\n]")
"""An LF without its CR, or a CR without its LF: never in a head read here (the search
looks at one byte before each match only, so it is linear)."""


class Malformed(Exception):
    """Bytes that are not a whole answer of the shape the channel reads (the words say
    which part)."""


class TooLarge(Malformed):
    """An answer whose `Content-Length` passes the reader's bound."""


@dataclass(slots=True)
class ReadAnswer:
    """One answer: `status`, `headers` (lower-case names, Latin-1, in order), `body`, and
    whether its connection may carry another request (`keep`: HTTP/1.1, no
    `Connection: close`, no byte past the body)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    keep: bool


class AnswerReader:
    """Reads one answer from the bytes fed to it (see the module).

    Args:
        max_body_bytes: the largest body taken; a larger one raises `TooLarge`.
    """

    __slots__ = ("_buf", "_head", "_max_body", "_seen")

    def __init__(self, max_body_bytes: int) -> None:
        self._max_body = max_body_bytes
        self._buf = bytearray()
        """The bytes fed so far, once more than one feed is needed (amortized: no copy of
        the whole per read)."""
        self._seen = 0
        """Where the search for the head's end goes on from (the bytes before hold none)."""
        self._head: tuple[int, list[tuple[str, str]], int, bool, int] | None = None
        """Once the head is whole: status, headers, body length, kept, where the body starts."""

    def feed(self, data: bytes) -> ReadAnswer | None:
        """Take the next bytes read; returns the answer once it is whole, else None. Each
        byte is looked at a bounded number of times, however the reads cut the answer.

        Raises:
            Malformed: the bytes so far cannot begin such an answer.
            TooLarge: its `Content-Length` passes `max_body_bytes`.
        """
        buf = self._buf
        if buf:
            buf += data
        got = buf if buf else data  # one read with the whole answer: no copy at all
        if self._head is None:
            end = got.find(b"\r\n\r\n", self._seen)
            if end < 0:
                if len(got) > MAX_HEAD_BYTES:
                    raise Malformed(f"a head larger than {MAX_HEAD_BYTES} bytes")
                if _STRAY.search(got, max(0, self._seen - 1)):  # a line ended by a bare LF
                    raise Malformed("a status line or header line out of form")
                self._seen = max(0, len(got) - 3)
                if not buf:
                    buf += data
                return None
            self._head = self._parse(got, end + 4)
        status, headers, length, keep, start = self._head
        have = len(got) - start
        if have < length:
            if not buf:
                buf += data
            return None
        body = bytes(got[start : start + length])
        return ReadAnswer(status, headers, body, keep and have == length)

    def _parse(
        self, buf: bytes | bytearray, end: int
    ) -> tuple[int, list[tuple[str, str]], int, bool, int]:
        if end > MAX_HEAD_BYTES:
            raise Malformed(f"a head larger than {MAX_HEAD_BYTES} bytes")
        head = _HEAD.fullmatch(buf, 0, end)
        if head is None:
            raise Malformed("a status line or header line out of form")
        minor, code, block = head.groups()
        status = int(code)
        if status < 200:
            raise Malformed(f"an interim answer ({status}) that was never asked for")
        headers = [
            (name.decode("latin-1").lower(), value.strip(b" \t").decode("latin-1"))
            for name, value in HEADER_LINE.findall(block)
        ]
        lengths = [v for k, v in headers if k == "content-length"]
        keep = minor == b"1"
        for name, value in headers:
            if name == "transfer-encoding":
                raise Malformed("a transfer coding (the hop's whole answers carry a length)")
            if name == "connection" and any(
                token.strip(" \t") == "close" for token in value.lower().split(",")
            ):
                keep = False
        if lengths and (len(set(lengths)) != 1 or not LENGTH_DIGITS.fullmatch(lengths[0])):
            raise Malformed("no single Content-Length")  # on a 204 or 304 too, as h11 reads it
        if status == 204 and lengths and lengths[0].lstrip("0"):
            raise Malformed("a Content-Length other than 0 on a 204 (RFC 9110 section 8.6)")
        if status in (204, 304):
            return status, headers, 0, keep, end
        if not lengths:
            raise Malformed("no single Content-Length")
        length = int(lengths[0])
        if length > self._max_body:
            raise TooLarge(f"an answer larger than {self._max_body} bytes")
        return status, headers, length, keep, end
