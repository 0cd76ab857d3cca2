"""`subscriptions/listen` at the HTTP edge, with raw bytes as any client (or attacker) sends
them, against a real bridge on 127.0.0.1 and a stub home process: refusals before the stream
are ordinary JSON errors, the head and the first event, the bounds, a client's close as its
cancellation, and a stream that outlives the read timeout and the idle close."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
import trio

from ftwbridge.mcp.listen_rules import live_uri

from ..e2e.env import REAL_WAIT_S, Env

VERSION = "2026-07-28"


def _request(env: Env, token: str, body: dict[str, Any], *, accept: str) -> bytes:
    url = urlsplit(env.url)
    data = json.dumps(body).encode()
    head = (
        f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nAccept: {accept}\r\n"
        f"MCP-Protocol-Version: {VERSION}\r\nMcp-Method: {body['method']}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def _listen(rid: Any, filt: Any) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"notifications": filt, "_meta": meta}
    return {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen", "params": params}


async def _open(env: Env, raw: bytes) -> trio.SocketStream:
    url = urlsplit(env.url)
    stream = await trio.open_tcp_stream(url.hostname or "", url.port or 80)
    await stream.send_all(raw)
    return stream


async def _read_until(stream: trio.SocketStream, marker: bytes, got: bytes = b"") -> bytes:
    while marker not in got:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        got += chunk
    return got


async def _answer(env: Env, raw: bytes) -> tuple[int, dict[str, str], Any]:
    """A whole answer with a length: (status, headers, JSON body or None)."""
    stream = await _open(env, raw)
    async with stream:
        got = await _read_until(stream, b"\r\n\r\n")
        head, _, rest = got.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        size = int(headers.get("content-length", "0"))
        while len(rest) < size:
            rest += await stream.receive_some(65536)
        return int(lines[0].split()[1]), headers, json.loads(rest) if size else None


async def _home(env: Env, **config: Any) -> tuple[str, str]:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    return token, live_uri(home.name)


async def test_refusals_before_the_stream_are_json_errors(env: Env) -> None:
    token, uri = await _home(env)
    with trio.fail_after(REAL_WAIT_S):
        status, _h, body = await _answer(
            env,
            _request(
                env, token, _listen(7, {"resourceSubscriptions": [uri]}), accept="application/json"
            ),
        )
        assert status == 406 and body["id"] == 7 and "text/event-stream" in body["error"]["message"]
        every = "application/json, text/event-stream"
        for bad in ({"resourceSubscriptions": uri}, {"resourceSubscriptions": [uri] * 17}, "all"):
            status, _h, body = await _answer(
                env, _request(env, token, _listen("a", bad), accept=every)
            )
            assert status == 400 and body["error"]["code"] == -32602 and body["id"] == "a"
        cancelled = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "a"},
        }
        status, _h, body = await _answer(env, _request(env, token, cancelled, accept=every))
        assert status == 202


async def test_the_head_the_ack_first_and_two_streams_an_agent(env: Env) -> None:
    token, uri = await _home(env)
    every = "application/json, text/event-stream"
    with trio.fail_after(REAL_WAIT_S):
        first = await _open(
            env, _request(env, token, _listen("s1", {"resourceSubscriptions": [uri]}), accept=every)
        )
        got = await _read_until(first, b"\n\n", b"")
        head, _, events = got.partition(b"\r\n\r\n")
        text = head.decode().lower()
        assert text.startswith("http/1.1 200")
        assert "content-type: text/event-stream" in text and "x-accel-buffering: no" in text
        assert "content-length" not in text
        got = await _read_until(first, b"\n\n", events)
        assert b"notifications/subscriptions/acknowledged" in got.split(b"\n\n")[0]
        ack = json.loads(got.split(b"data: ", 1)[1].split(b"\n", 1)[0])
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "s1"
        assert ack["params"]["notifications"] == {"resourceSubscriptions": [uri]}
        second = await _open(env, _request(env, token, _listen(2, {}), accept=every))
        await _read_until(second, b"acknowledged")
        status, headers, body = await _answer(
            env, _request(env, token, _listen(3, {}), accept=every)
        )
        assert status == 429 and int(headers["retry-after"]) >= 1 and body["id"] == 3
        await first.aclose()  # the client's close is its cancellation
        await env.bridge.listens.wait_streams_at_most(1)
        third = await _open(env, _request(env, token, _listen(4, {}), accept=every))
        await _read_until(third, b"acknowledged")
        await second.aclose()
        await third.aclose()


@pytest.mark.config(
    call_deadline_s=1.0,
    door_silence_s=3.0,
    idle_close_s=2.0,
    listen_keepalive_s=1.0,
    listen_min_interval_s=60.0,
)
async def test_a_stream_outlives_the_read_timeout_and_the_idle_close(env: Env) -> None:
    token, uri = await _home(env)
    every = "application/json, text/event-stream"
    with trio.fail_after(REAL_WAIT_S):
        s = await _open(
            env, _request(env, token, _listen(1, {"resourceSubscriptions": [uri]}), accept=every)
        )
        got = await _read_until(s, b"resources/updated")  # the first update: the feed is live
        start = trio.current_time()
        while trio.current_time() - start < 8:  # past the read timeout (3 s) and idle close (2 s)
            chunk = await s.receive_some(65536)
            assert chunk, "the bridge closed the stream"
            got += chunk
        assert got.count(b": keep-alive") >= 4
        assert env.bridge.pool.feeds.stats.running == 1
        assert env.bridge.pool.statistics().sessions == 1
        await s.aclose()


@pytest.mark.config(listen_streams=1)
async def test_past_the_process_bound_a_listen_gets_503(env: Env) -> None:
    home = await env.add_home("h1")
    _k1, _a1, one = await env.agent(home)
    _k2, _a2, two = await env.agent(home)
    every = "application/json, text/event-stream"
    with trio.fail_after(REAL_WAIT_S):
        first = await _open(env, _request(env, one, _listen(1, {}), accept=every))
        await _read_until(first, b"acknowledged")
        status, headers, body = await _answer(env, _request(env, two, _listen(2, {}), accept=every))
        assert status == 503 and int(headers["retry-after"]) >= 1 and body["id"] == 2
        await first.aclose()


async def test_discover_and_initialize_declare_what_is_served(env: Env) -> None:
    token, _uri = await _home(env)
    with trio.fail_after(REAL_WAIT_S):
        meta = _listen(1, {})["params"]["_meta"]
        discover = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "server/discover",
            "params": {"_meta": meta},
        }
        status, _h, body = await _answer(
            env, _request(env, token, discover, accept="application/json")
        )
        assert status == 200
        assert body["result"]["capabilities"]["resources"]["subscribe"] is True
        url = urlsplit(env.url)
        init = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        ).encode()
        raw = (
            f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Length: {len(init)}\r\n\r\n"
        ).encode() + init
        status, _h, body = await _answer(env, raw)
        assert status == 200
        assert body["result"]["capabilities"]["resources"]["subscribe"] is False


@pytest.mark.config(listen_keepalive_s=0.002, listen_stuck_s=1.0, door_silence_s=120.0)
async def test_a_stream_whose_client_reads_nothing_is_closed(env: Env) -> None:
    token, _uri = await _home(env)
    every = "application/json, text/event-stream"
    url = urlsplit(env.url)
    sock = trio.socket.socket()
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)  # fills at once
    await sock.connect((url.hostname or "", url.port or 80))
    stream = trio.SocketStream(sock)
    with trio.fail_after(REAL_WAIT_S):
        await stream.send_all(_request(env, token, _listen(1, {}), accept=every))
        await _read_until(stream, b"acknowledged")
    with trio.fail_after(60):  # half the read timeout: only the stream's own rule lets it go
        await env.bridge.listens.wait_streams_at_most(0)  # it reads no more: let go
    await stream.aclose()
