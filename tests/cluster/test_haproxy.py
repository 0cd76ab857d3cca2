"""`make cluster`'s HAProxy configuration (`cluster.services.write_haproxy`, the one
docs/operations.md offers to copy) in front of scripted instances: plain HTTP/1.1 servers on
127.0.0.1 that do, every time, what a bridge instance does only at an unlucky instant.

- An instance closes an idle kept-alive connection after its `keep_alive_s`; a request that
  HAProxy sends on it as it closes gets no answer, and HAProxy then closes the client's
  connection with nothing said ("Server disconnected without sending a response": the flake
  of the rolling-restart test under load). Here an instance closes every kept-alive
  connection, unread, as soon as a second request arrives on it.
- An instance killed (`kill -9`) while answering a call ends its connection with no answer.
  Here an instance told to reads one request and closes without answering.
- What HAProxy acts on (a request's `Mcp-Method`/`Mcp-Name` saying it is a read, which it
  sends again), the bridge checks: a checking instance runs the bridge's own `classify` on
  what it reads, refuses what that refuses, and "acts" on the rest before it is killed.

Each test makes its calls on one kept-alive client connection, as an assistant does (HAProxy
2.6 answers a failure on the first request of a connection with its 502 in words, and closes
a later one silently). Skipped where HAProxy is not installed (`make haproxy`).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from cluster.procs import free_port
from cluster.services import NO_HAPROXY, Instance, start_haproxy, write_haproxy
from ftwbridge.mcp.inbound import Rejection, classify

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason=NO_HAPROXY)

BOUND_S = 30.0
"""Bound on each test, seconds (HAProxy's start and a few calls on a loaded machine)."""
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


@dataclass
class Script:
    """What the scripted instances do and saw: `drop_next` makes the next request that any of
    them reads end with no answer; `seen` lists (instance, tool or method) per request read."""

    drop_next: bool = False
    seen: list[tuple[str, str]] = field(default_factory=list)
    acted: list[tuple[str, str]] = field(default_factory=list)
    """(instance, tool) per request a checking instance took and acted on."""


async def read_request(stream: trio.SocketStream) -> dict[str, str] | None:
    """One request head and body off `stream`: its headers (lower case, with the body as
    text under the key "" and every value of a repeated header under "name*" joined by a
    newline), None at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    headers: dict[str, str] = {}
    for line in head.decode().split("\r\n")[1:]:
        name, value = line.split(":", 1)
        key = name.strip().lower()
        headers[key] = value.strip()
        headers[key + "*"] = (headers.get(key + "*", "") + "\n" + value.strip()).lstrip("\n")
    while len(body) < int(headers.get("content-length", "0")):
        body += await stream.receive_some(65536)
    headers[""] = body.decode()
    return headers


async def checking(name: str, script: Script, stream: trio.SocketStream) -> None:
    """A checking instance's `/mcp` connection: the bridge's `classify` on what it reads; a
    rejection is answered 400 at once, anything else is acted on (`script.acted`) and then,
    when `drop_next`, the instance is killed before it answers."""
    async with stream:
        headers = await read_request(stream)
        if headers is None:
            return
        lists = {k[:-1]: v.split("\n") for k, v in headers.items() if k.endswith("*")}
        route = classify(lists, headers[""].encode())
        if isinstance(route, Rejection):
            answer = b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -32020, "message": "no"}}'
            status = b"400 Bad Request"
        else:
            script.acted.append((name, str(route.params.get("name", route.method))))
            if script.drop_next:
                script.drop_next = False
                return  # killed after acting, before answering
            answer = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": false}}'
            status = b"200 OK"
        await stream.send_all(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer
        )


async def instance(name: str, script: Script, stream: trio.SocketStream) -> None:
    """A scripted instance's `/mcp` connection (see the module docstring)."""
    async with stream:
        headers = await read_request(stream)
        if headers is None:
            return
        script.seen.append((name, headers.get("mcp-name") or headers.get("mcp-method") or "-"))
        if script.drop_next:
            script.drop_next = False
            return  # killed while answering: the connection ends with nothing said
        body = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": false}}'
        close = headers.get("connection", "").lower() == "close"
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + (b"Connection: close\r\n" if close else b"")
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )
        if not close:  # kept alive: the next request crosses the idle close, unread
            await trio.lowlevel.wait_readable(stream.socket)


async def ready(stream: trio.SocketStream) -> None:
    """An admin listener: `/readyz` says 200. HAProxy may reset a health check's connection
    before the answer is written (a check it gave up after `inter` on a loaded machine, or
    an old worker's at a reload): that ends this connection alone, as at a bridge's admin
    listener, and never the scripted instance."""
    async with stream:
        try:
            if await read_request(stream) is not None:
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
        except trio.BrokenResourceError:
            return


@asynccontextmanager
async def haproxy_over(
    tmp_path: Path, names: list[str], serve: Any = instance
) -> AsyncIterator[tuple[str, Script]]:
    """HAProxy on `write_haproxy`'s configuration over scripted instances `names` (each
    connection served by `serve(name, script, stream)`); yields its `/mcp` URL and the
    instances' script."""
    script = Script()
    async with trio.open_nursery() as nursery:
        made = []
        for name in names:
            main = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
            admin = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
            nursery.start_soon(trio.serve_listeners, lambda s, n=name: serve(n, script, s), [main])
            nursery.start_soon(trio.serve_listeners, ready, [admin])
            ports = [listener.socket.getsockname()[1] for listener in (main, admin)]
            made.append(Instance(name, tmp_path, ports[0], ports[1], 0, settings={}))
        port = free_port()
        await start_haproxy(nursery, tmp_path, port, write_haproxy(tmp_path, port, made))
        yield f"http://127.0.0.1:{port}/mcp", script
        nursery.cancel_scope.cancel()


async def call(http: httpx2.AsyncClient, url: str, tool: str | None) -> str:
    """A `tools/call` of `tool` in the 2026-07-28 era (None: `tools/list` in the 2025-11-25
    era, with no `Mcp-Method`); returns "ok", the status of another answer, or the error."""
    if tool is None:
        headers = {"MCP-Protocol-Version": "2025-11-25"}
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    else:
        headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}
        headers["Mcp-Name"] = tool
        params = {"name": tool, "arguments": {}, "_meta": META}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    try:
        answer = await http.post(url, json=body, headers=headers)
    except httpx2.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok" if answer.status_code == 200 else str(answer.status_code)


CLIENT_KEEP_ALIVE_S = 5.0
"""How long the client keeps its idle connection: under HAProxy's own idle close of a client
connection (`timeout http-keep-alive`, unset, so `timeout http-request`: 10 s). A client that
kept it longer sent its next request, on an overloaded machine, as HAProxy closed it, and read
a connection reset."""


def client() -> httpx2.AsyncClient:
    """One kept-alive connection to HAProxy, as an assistant holds it."""
    limits = httpx2.Limits(max_connections=1, keepalive_expiry=CLIENT_KEEP_ALIVE_S)
    return httpx2.AsyncClient(limits=limits)


@pytest.mark.parametrize("tool", ["ev_charge_now", "status", None])
async def test_no_call_crosses_an_instance_closing_its_idle_connection(
    tmp_path: Path, tool: str | None
) -> None:
    with trio.fail_after(BOUND_S):
        async with haproxy_over(tmp_path, ["b1"]) as (url, script), client() as http:
            said = [await call(http, url, tool) for _ in range(3)]
    assert said == ["ok", "ok", "ok"], (said, script.seen)
    assert len(script.seen) == 3, script.seen  # each once: none was lost and sent again


@pytest.mark.parametrize(
    ("tool", "sent"),
    [("status", 2), ("diag_run", 2), ("ev_charge_now", 1), ("goal_request", 1), (None, 1)],
)
async def test_only_a_read_an_instance_dropped_is_sent_again(
    tmp_path: Path, tool: str | None, sent: int
) -> None:
    with trio.fail_after(BOUND_S):
        async with haproxy_over(tmp_path, ["b1", "b2"]) as (url, script), client() as http:
            assert await call(http, url, "status") == "ok"  # the connection is kept alive
            script.drop_next = True
            said = await call(http, url, tool)
    dropped = script.seen[1:]
    assert len(dropped) == sent, (said, dropped)  # a control call or a legacy one: never twice
    if sent == 2:
        assert said == "ok", (said, dropped)  # answered by the instance HAProxy sent it to next
    else:
        assert said != "ok", (said, dropped)


LABELLED_READ = {"Mcp-Method": "tools/call", "Mcp-Name": "status"}


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
async def test_a_control_call_labelled_as_a_read_is_never_sent_twice(
    tmp_path: Path, version: str | None
) -> None:
    """`ev_charge_now` in the body, `Mcp-Name: status` in the headers, in every era: HAProxy
    would send it again if the instance it went to died after acting; the bridge refuses
    it, so nothing acts, once or twice. An honest read killed the same way is sent again."""
    params: dict[str, Any] = {"name": "ev_charge_now", "arguments": {"charger": "lp1"}}
    headers = dict(LABELLED_READ)
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    if version == "2026-07-28":
        params["_meta"] = META
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    with trio.fail_after(BOUND_S):
        async with (
            haproxy_over(tmp_path, ["b1", "b2"], checking) as (url, script),
            client() as http,
        ):
            script.drop_next = True
            try:
                answer = await http.post(url, json=body, headers=headers)
                said = str(answer.status_code)
            except httpx2.HTTPError as exc:
                said = type(exc).__name__
            assert script.acted == [], (said, script.acted)  # neither instance acted on it
            assert said == "400"
            honest = body | {"params": params | {"name": "status", "arguments": {}}}
            script.drop_next = True
            answer = await http.post(url, json=honest, headers=headers)
    assert answer.status_code == 200 and [t for _, t in script.acted] == ["status", "status"]
