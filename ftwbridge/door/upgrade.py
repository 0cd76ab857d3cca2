"""The door listener's opening handshake, sans-I/O: one HTTP/1.1 request head in, a verdict out.

`classify_upgrade(request)` reads an `h11.Request` and returns `Upgrade(key)` for a WebSocket
opening handshake to `/v1/box` (RFC 6455 section 4.2.1: GET, `Upgrade: websocket`, a
`Connection` header with the `upgrade` token, `Sec-WebSocket-Version: 13`, a 16-byte base64
`Sec-WebSocket-Key`), or a `Refusal` with the HTTP status and words to answer with. It raises
nothing and does no I/O; `accept_head` and `refusal_head` build the bytes of either answer.
The door offers no subprotocol and no extension (part C's messages are small binary CBOR).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Final

import h11

DOOR_PATH: Final = "/v1/box"
WS_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455 section 1.3: appended to the key before hashing for `Sec-WebSocket-Accept`."""
REASONS: Final = {
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    426: b"Upgrade Required",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class Upgrade:
    """A well-formed opening handshake to the door; `key` is its `Sec-WebSocket-Key`."""

    key: bytes


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer other than 101: `status` (HTTP) and `words` (its plain-text body)."""

    status: int
    words: str


def _tokens(value: bytes) -> set[bytes]:
    return {part.strip().lower() for part in value.split(b",")}


def classify_upgrade(request: h11.Request) -> Upgrade | Refusal:
    """The verdict on one request head (RFC 6455 section 4.2.1, numbered as there)."""
    target = request.target.split(b"?", 1)[0]
    if target != DOOR_PATH.encode():  # 1: the door listener serves one resource
        return Refusal(404, f"This listener serves only {DOOR_PATH} (the box's uplink).")
    if request.method != b"GET":  # 1: the method
        return Refusal(405, "The box's uplink is a WebSocket opened by GET.")
    if request.http_version != b"1.1":  # 1: HTTP/1.1 or higher (h11 speaks 1.0 and 1.1)
        return Refusal(400, "The box's uplink is opened by an HTTP/1.1 request.")
    headers: dict[bytes, bytes] = {}
    for name, value in request.headers:
        headers[name] = headers[name] + b"," + value if name in headers else value
    upgrade = _tokens(headers.get(b"upgrade", b""))
    if b"websocket" not in upgrade or b"upgrade" not in _tokens(headers.get(b"connection", b"")):
        return Refusal(426, "Open the box's uplink as a WebSocket (Upgrade: websocket).")
    if headers.get(b"sec-websocket-version", b"").strip() != b"13":  # 6: the version
        return Refusal(426, "Only WebSocket version 13 is spoken here.")
    key = headers.get(b"sec-websocket-key", b"").strip()
    try:  # 5: a base64 nonce of 16 bytes
        ok = len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        return Refusal(400, "Sec-WebSocket-Key must be 16 bytes in base64.")
    return Upgrade(key)


def accept_token(key: bytes) -> bytes:
    """`Sec-WebSocket-Accept` for `key` (RFC 6455 section 4.2.2, step 5.4)."""
    return base64.b64encode(hashlib.sha1(key + WS_GUID, usedforsecurity=False).digest())


def accept_response(key: bytes) -> h11.InformationalResponse:
    """The 101 that opens the WebSocket for `key`, for h11 to write."""
    headers = [
        (b"upgrade", b"websocket"),
        (b"connection", b"Upgrade"),
        (b"sec-websocket-accept", accept_token(key)),
    ]
    return h11.InformationalResponse(
        status_code=101, headers=headers, reason=b"Switching Protocols"
    )


def refusal_head(refusal: Refusal) -> bytes:
    """The whole answer for `refusal` (head and body); the connection closes after it."""
    body = (refusal.words + "\n").encode()
    reason = REASONS.get(refusal.status, b"Refused")
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n" % (refusal.status, reason, len(body))
    )
    if refusal.status == 426:
        head += b"upgrade: websocket\r\nsec-websocket-version: 13\r\n"
    return head + b"\r\n" + body
