"""HAProxy reloaded under load (`cluster.services.reload_haproxy`, docs/operations.md "Faults"):
`make cluster`'s configuration in front of scripted instances that take `ANSWER_S` over each
call. Calls in flight at the reload are answered by the old worker, calls made during and after
it by the new one; none is refused or cut. Skipped where HAProxy is not installed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx2
import pytest
import trio

from cluster.procs import free_port
from cluster.services import NO_HAPROXY, Instance, reload_haproxy, start_haproxy, write_haproxy

from .test_haproxy import read_request, ready

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None, reason=NO_HAPROXY)

BOUND_S = 60.0
"""Bound on the test, seconds (HAProxy's start and reload, and the calls, on a loaded machine)."""
ANSWER_S = 1.5
"""How long a scripted instance takes over each call, seconds."""
CALLS = 6
"""Calls in flight at the reload, and again during it."""
BODY = b'{"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": false}}'


async def slow_instance(stream: trio.SocketStream) -> None:
    """One connection: each request answered after `ANSWER_S`, kept alive (HAProxy may
    reset it after an answer: `http-server-close`)."""
    async with stream:
        try:
            while await read_request(stream) is not None:
                await trio.sleep(ANSWER_S)
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + b"Content-Length: %d\r\n\r\n" % len(BODY)
                    + BODY
                )
        except trio.BrokenResourceError:
            return


async def test_a_reload_under_load_loses_no_call(tmp_path: Path) -> None:
    """Each call on a connection of its own, through one client made before HAProxy starts:
    a client made per call loads its TLS context in this process's one thread (a quarter of
    a second each on a loaded machine), and a dozen of them held the scripted instances'
    health checks past HAProxy's 1 s until it called both instances down (503)."""
    results: list[str] = []
    no_reuse = httpx2.Limits(max_keepalive_connections=0)
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(BOUND_S), limits=no_reuse)

    async def one_call(url: str) -> None:
        try:
            answer = await http.post(url, content=b'{"jsonrpc":"2.0","id":1}')
        except httpx2.HTTPError as exc:
            results.append(f"{type(exc).__name__}: {exc}")
        else:
            results.append("ok" if answer.status_code == 200 else str(answer.status_code))

    with trio.fail_after(BOUND_S):
        async with http, trio.open_nursery() as nursery:
            made = []
            for name in ("b1", "b2"):
                main = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
                admin = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
                nursery.start_soon(trio.serve_listeners, slow_instance, [main])
                nursery.start_soon(trio.serve_listeners, ready, [admin])
                ports = [listener.socket.getsockname()[1] for listener in (main, admin)]
                made.append(Instance(name, tmp_path, ports[0], ports[1], 0, settings={}))
            port = free_port()
            child = await start_haproxy(
                nursery, tmp_path, port, write_haproxy(tmp_path, port, made)
            )
            url = f"http://127.0.0.1:{port}/mcp"
            async with trio.open_nursery() as calls:
                for _ in range(CALLS):
                    calls.start_soon(one_call, url)
                await trio.sleep(ANSWER_S / 3)  # they are in flight
                reload_haproxy(child)
                for _ in range(CALLS):  # and more during the reload
                    calls.start_soon(one_call, url)
                    await trio.sleep(0.05)
            await one_call(url)  # after it, on the new worker
            nursery.cancel_scope.cancel()
    assert results == ["ok"] * (2 * CALLS + 1), results
    log = (tmp_path / "haproxy.log").read_text()
    assert "Loading success" in log, log  # it did reload, and was not restarted
