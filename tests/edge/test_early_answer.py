"""An answer `/mcp` gives from a request's head alone (a 401) comes after its body, on a
connection that stays open, over a real socket to a real bridge (`ftwbridge/mcp/asgi.py`,
`_Body`). Before, the bridge answered as soon as the head was in and hypercorn then closed the
connection, the request unfinished: a client whose body followed its head (two writes, a
loaded machine between them) sent it into a closed socket, and the reset that came back could
destroy the 401 before the client read it: the soak counted such a revoked agent's call
`broken`. Here the body comes 0.3 s after the head, then a second request on the same
connection."""

from __future__ import annotations

import socket
import time

from .live import WAIT_S, LiveBridge

BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'


def _request(host: str, port: int) -> tuple[bytes, bytes]:
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n"
        f"authorization: Bearer not-a-token\r\ncontent-length: {len(BODY)}\r\n\r\n"
    )
    return head.encode(), BODY


def _answers(sock: socket.socket, want: int) -> list[bytes]:
    """Read until `want` whole answers came (each a head and its `content-length` body), the
    bridge closed or reset the connection, or `WAIT_S` passed."""
    sock.settimeout(WAIT_S)
    data, found = b"", []
    deadline = time.monotonic() + WAIT_S
    while len(found) < want and time.monotonic() < deadline:
        if b"\r\n\r\n" in data:
            head, rest = data.split(b"\r\n\r\n", 1)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            if len(rest) >= length:
                found.append(head.split(b"\r\n")[0])
                data = rest[length:]
                continue
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return found


def test_a_401_waits_for_the_body_and_the_connection_stays_open(live: LiveBridge) -> None:
    host, port = live.main
    head, body = _request(host, port)
    with socket.create_connection((host, port), timeout=WAIT_S) as sock:
        sock.sendall(head)
        time.sleep(0.3)  # the client's second write comes late
        sock.sendall(body)
        sock.sendall(head + body)  # the next request, on the same connection
        answers = _answers(sock, 2)
    assert answers == [b"HTTP/1.1 401 ", b"HTTP/1.1 401 "], answers
