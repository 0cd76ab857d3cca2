"""A `/mcp` body is read once its declared `Content-Length` has come (`asgi.read_body`),
before hypercorn's separate end event: over a real socket, through hypercorn and h11, the
end event that follows is still taken in its turn, and a body split from its head, requests
pipelined behind it, bytes past the declared length and a client gone mid-body are answered
as before."""

from __future__ import annotations

import contextlib
import json
import socket
import time

from .live import WAIT_S, LiveBridge, read_until_closed

BODY = json.dumps(
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "status"}}
).encode()


def _head(live: LiveBridge, length: int, close: bool = False) -> bytes:
    host, port = live.main
    return (
        f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {live.tokens[1]}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {length}\r\n{'Connection: close' + chr(13) + chr(10) if close else ''}"
        "\r\n"
    ).encode()


def _answers(data: bytes) -> list[tuple[bytes, bytes]]:
    """Each answer's status line and body (heads with a `content-length`), all of `data`."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data[:200]
        fields = dict(
            line.split(b": ", 1) for line in head.lower().split(b"\r\n")[1:] if b": " in line
        )
        length = int(fields[b"content-length"])
        assert len(rest) >= length, "an answer cut short"
        out.append((head.split(b"\r\n")[0], rest[:length]))
        data = rest[length:]
    return out


def _ok(answer: tuple[bytes, bytes]) -> bool:
    status, body = answer
    reply = json.loads(body)
    return (
        status.startswith(b"HTTP/1.1 200 ") and reply["id"] == 3 and not reply["result"]["isError"]
    )


def test_split_and_pipelined_bodies_are_each_answered_on_one_connection(
    live: LiveBridge,
) -> None:
    """A body after its head, a body in two writes, two requests in one write: each answered
    whole and in order, the connection kept until the last asks for its close."""
    whole = _head(live, len(BODY)) + BODY
    with live.connect() as sock:
        sock.sendall(_head(live, len(BODY)))
        time.sleep(0.2)  # the body comes in a write of its own
        sock.sendall(BODY)
        sock.sendall(whole + whole)  # pipelined
        sock.sendall(_head(live, len(BODY)) + BODY[:10])
        time.sleep(0.2)
        sock.sendall(BODY[10:])
        sock.sendall(_head(live, len(BODY), close=True) + BODY)
        answers = _answers(read_until_closed(sock, WAIT_S))
    assert len(answers) == 5 and all(_ok(a) for a in answers), answers
    live.assert_serving()


def test_bytes_past_the_declared_length_are_the_next_request(live: LiveBridge) -> None:
    """h11 ends the body at its length: what follows is read as the next request, here not
    one (400, and the connection closed)."""
    with live.connect() as sock:
        sock.sendall(_head(live, len(BODY)) + BODY + b"garbage\r\n\r\n")
        answers = _answers(read_until_closed(sock, WAIT_S))
    assert len(answers) == 2 and _ok(answers[0]), answers
    assert answers[1][0].startswith(b"HTTP/1.1 400 "), answers
    live.assert_serving()


def test_a_body_short_of_its_length_then_the_client_gone(live: LiveBridge) -> None:
    """Fewer bytes than declared, then the connection closed (or reset): nothing is answered,
    and the bridge serves on."""
    for reset in (False, True):
        sock = live.connect()
        sock.sendall(_head(live, len(BODY) + 40) + BODY)
        time.sleep(0.2)
        if reset:  # RST instead of FIN
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
        with contextlib.suppress(OSError):
            sock.close()
        live.assert_serving()
