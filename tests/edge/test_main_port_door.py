"""The main listener refuses the box's uplink in words: `/v1/box` (a plain request or a
WebSocket opening handshake) and a WebSocket handshake to any path get a 404 whose plain-text
body names `door_bind` and the door's port, and the connection ends after it (the answer says
`connection: close`). Raw bytes, as a box or a proxy that still points at the main port sends
them; no fault is counted, and the bridge serves on.
"""

from __future__ import annotations

import pytest
import trio

from tests.e2e.env import REAL_WAIT_S, Env

from .live import WS_UPGRADE

PLAIN = "GET /v1/box HTTP/1.1\r\nHost: {host}\r\n\r\n"  # keep-alive: the server must end it
CASES = {
    "a plain GET of /v1/box": (PLAIN, "does not serve the box's uplink"),
    "a POST to /v1/box with a body": (
        "POST /v1/box HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\nhello",
        "does not serve the box's uplink",
    ),
    "a WebSocket handshake to /v1/box": (
        WS_UPGRADE.replace("{path}", "/v1/box"),
        "does not serve the box's uplink",
    ),
    "a WebSocket handshake to /mcp": (
        WS_UPGRADE.replace("{path}", "/mcp"),
        "speaks no WebSocket",
    ),
    "a WebSocket handshake to /nowhere": (
        WS_UPGRADE.replace("{path}", "/nowhere"),
        "speaks no WebSocket",
    ),
}


async def _exchange(port: int, raw: bytes) -> bytes:
    """Send `raw` on a new connection and read until the server ends it."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


def _faults(env: Env) -> float:
    registry = env.bridge.metrics.registry
    return sum(
        registry.get_sample_value("ftwbridge_connection_faults_total", {"kind": kind}) or 0.0
        for kind in ("http", "http2", "websocket")
    )


@pytest.mark.parametrize("name", list(CASES))
async def test_the_main_port_refuses_the_door_in_words(env: Env, name: str) -> None:
    template, words = CASES[name]
    port = int(env.bridge.site.public_url.rsplit(":", 1)[1])
    door_port = int(env.door_url.removesuffix("/v1/box").rsplit(":", 1)[1])
    assert door_port not in (0, port)
    before = _faults(env)
    with trio.fail_after(REAL_WAIT_S):  # a connection left open fails here, not hangs
        data = await _exchange(port, template.format(host=f"127.0.0.1:{port}").encode())
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().lower().split("\r\n")
    assert lines[0] == "http/1.1 404 ", data[:300]
    assert "content-type: text/plain; charset=utf-8" in lines
    assert "connection: close" in lines
    assert f"content-length: {len(body)}" in lines  # the whole body, then the end
    text = body.decode()
    assert words in text and "door_bind" in text and f"port {door_port} " in text, text
    assert text.endswith(".\n") and "Traceback" not in text
    assert _faults(env) == before
    async with env.http() as http:  # the bridge serves on
        answer = await http.get(env.bridge.site.metadata_url)
        assert answer.status_code == 200


async def test_the_door_listener_serves_the_uplink_meanwhile(env: Env) -> None:
    """The same handshake to the door's own port is answered with the 101."""
    door_port = int(env.door_url.removesuffix("/v1/box").rsplit(":", 1)[1])
    raw = WS_UPGRADE.format(path="/v1/box", host=f"127.0.0.1:{door_port}").encode()
    stream = await trio.open_tcp_stream("127.0.0.1", door_port)
    async with stream:
        await stream.send_all(raw)
        head = b""
        with trio.fail_after(REAL_WAIT_S):
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(4096)
                assert chunk, head
                head += chunk
    assert head.startswith(b"HTTP/1.1 101 "), head[:200]
