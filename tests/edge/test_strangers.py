"""Connections that have not sent a whole request get their own quota on every hypercorn
listener (ftwbridge/edge.py; docs/operations.md, "Limits that strangers cannot fill"): a
thousand idle strangers on raw sockets, from several loopback addresses, hold at most
`MAX_STRANGERS` of the bridge's sockets, and a box and an assistant still get in."""

from __future__ import annotations

import httpx2
import pytest
import trio

from ftwbridge.edge import MAX_STRANGERS, STRANGERS_PER_SOURCE
from tests.e2e.env import REAL_WAIT_S, Env

STRANGERS = 1000
SOURCES = [f"127.0.0.{n}" for n in range(2, 12)]


async def _idle_strangers(port: int) -> list[trio.SocketStream]:
    """`STRANGERS` connections that send nothing, spread over `SOURCES`."""
    return [
        await trio.open_tcp_stream("127.0.0.1", port, local_address=SOURCES[n % len(SOURCES)])
        for n in range(STRANGERS)
    ]


async def _until_closed(idle: list[trio.SocketStream], count: int) -> None:
    """Return once the bridge has closed `count` of the `idle` connections."""
    closed = 0
    enough = trio.Event()

    async def watch(stream: trio.SocketStream) -> None:
        nonlocal closed
        while await stream.receive_some(65536):
            pass
        closed += 1
        if closed >= count:
            enough.set()

    async with trio.open_nursery() as nursery:
        for stream in idle:
            nursery.start_soon(watch, stream)
        await enough.wait()
        nursery.cancel_scope.cancel()


@pytest.mark.config(keep_alive_s=REAL_WAIT_S * 2)  # idle strangers are not timed out here
async def test_a_thousand_idle_strangers_hold_a_bounded_share_of_the_door(env: Env) -> None:
    assert STRANGERS_PER_SOURCE * len(SOURCES) > MAX_STRANGERS  # the total is the bound hit
    port = int(env.bridge.site.public_url.rsplit(":", 1)[1])
    idle = []
    try:
        with trio.fail_after(REAL_WAIT_S):
            idle = await _idle_strangers(port)
            async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:  # an assistant
                r = await http.get(
                    env.bridge.site.public_url + "/.well-known/oauth-protected-resource/mcp"
                )
                assert r.status_code == 200
        with trio.fail_after(REAL_WAIT_S):  # all but MAX_STRANGERS were refused or shed
            await _until_closed(idle, STRANGERS - MAX_STRANGERS)
        await env.add_home("h1")  # a box dials the door and authenticates
    finally:
        for stream in idle:
            await stream.aclose()
