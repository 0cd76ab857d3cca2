"""The request heads the internal listener reads without h11, sans-I/O (RFC 9112; the
listener's wire: `mesh/wire.py`; docs/performance.md, "The cluster hop").

Every request of the hop's channel (`mesh/channel.py`) has one plain shape: an HTTP/1.1
request line, one `Host`, a body framed by one `Content-Length` (or none), and no header
that changes the connection's course (`Connection`, `Transfer-Encoding`, `Expect`,
`Upgrade`), and not `CONNECT`. `lean_head` reads such a head in two passes of regular
expressions over its bytes, every line checked as h11 checks it; for any other head it returns None and the wire
hands the bytes to h11, which decides as before (a request of another shape is served, a
malformed one refused). So it only ever takes heads h11 would take, and reads them as h11
reads them (`tests/cluster/test_wire.py` holds the two side by side).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

LEAN_HEAD_BYTES: Final = 8 * 1024
"""The longest head read here, bytes (a forward's is about 1 KiB); a longer one is h11's,
whose buffer reads a head sent a byte at a time without reading it again each time."""
_HEAD: Final = re.compile(
    rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/1\.1\r\n"
    rb"((?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t \x21-\x7e\x80-\xff]*\r\n)*)\r\n"
)
"""A whole head: the request line (a token method, a target of visible characters, version
1.1), then every header line as RFC 9110 sections 5.5 and 5.6.2 allow it (a token name, a
value of visible characters, spaces and tabs: no CR, LF, NUL or DEL inside; no folded line)."""
HEADER_LINE: Final = re.compile(rb"([^:]+):([^\r]*)\r\n")
"""One header line of a head `_HEAD` matched: its name and its value, the spaces and tabs
around it stripped after (`_HEAD` ends each line at its first CR and each name at its first
colon, so each match is found in one pass; a lazy value before optional blanks would try the
blanks again at each of a run's characters: a quadratic cost a stranger could ask for)."""
LENGTH_DIGITS: Final = re.compile(r"[0-9]{1,18}")
"""A `Content-Length` value read here: digits only, at most 18 (any longer is h11's, or Lost)."""
_COURSE: Final = frozenset({"connection", "transfer-encoding", "expect", "upgrade"})
"""Headers that change how the connection goes on: such a head is h11's to read."""


@dataclass(frozen=True, slots=True)
class LeanHead:
    """A request head read without h11: `method`, `target`, `fields` (lower-case name ->
    every value, Latin-1, in order) and the body's `length`, bytes."""

    method: bytes
    target: bytes
    fields: dict[str, list[str]]
    length: int


def lean_head(head: bytes) -> LeanHead | None:
    """`head` (a request head through its blank line) read, or None when it is not of the
    plain shape (see the module): then h11 is to read it."""
    matched = _HEAD.fullmatch(head)
    if matched is None:
        return None
    method, target, block = matched.groups()
    if method == b"CONNECT":  # h11 ends its connection after it (RFC 9110 section 9.3.6)
        return None
    fields: dict[str, list[str]] = {}
    for name, value in HEADER_LINE.findall(block):
        field = value.strip(b" \t").decode("latin-1")
        fields.setdefault(name.decode("latin-1").lower(), []).append(field)
    if len(fields.get("host", ())) != 1 or not _COURSE.isdisjoint(fields):
        return None
    lengths = fields.get("content-length", ["0"])
    if len(lengths) != 1 or not LENGTH_DIGITS.fullmatch(lengths[0]):
        return None
    return LeanHead(method, target, fields, int(lengths[0]))


REASONS: Final = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    421: "Misdirected Request",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}
"""Reason phrases of the answers written here (RFC 9110 section 15; others go without one)."""


def answer_head(status: int, reason: str, headers: list[tuple[str, str]]) -> bytes:
    """An answer's status line and header lines (RFC 9112 sections 4 and 5), in one checked
    pass instead of h11's expressions per header.

    Raises:
        ValueError: a status not from 200 to 599 (the entry reads no other), or a header no
            HTTP/1.1 answer may carry (a control character other than a tab anywhere in a
            value, a name that is not a token).
    """
    names = "".join(name for name, _ in headers)
    values = "".join(value for _, value in headers)
    if not 200 <= status <= 599:  # the hop's answers are final (RFC 9110 section 15)
        raise ValueError(f"a status no whole answer here may have ({status})")
    if not all(name for name, _ in headers) or _BAD_NAME.search(names) or _BAD_VALUE.search(values):
        raise ValueError("an answer header no HTTP/1.1 answer may carry")
    lines = [f"HTTP/1.1 {status} {reason}\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in headers]
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


_BAD_NAME: Final = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
"""Not a `tchar` (RFC 9110 section 5.6.2): never in a field name."""
_BAD_VALUE: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Never in a field value (RFC 9110 section 5.5: visible characters, spaces and tabs; the
entry's reader, `answer.py`, takes no other)."""
