"""Connections that have not sent a whole request get their own quota on every hypercorn
listener (ftwbridge/edge/; docs/operations.md, "Limits that strangers cannot fill"): a
thousand idle strangers on raw sockets, from several loopback addresses, hold at most
`MAX_STRANGERS` of the bridge's sockets, and a box and an assistant still get in."""

from __future__ import annotations

import httpx2
import pytest
import trio

from ftwbridge.door.door import DOOR_STRANGERS_PER_SOURCE
from ftwbridge.edgerules import MAX_STRANGERS, STRANGERS_PER_SOURCE
from ftwbridge.fairshare import Slots
from tests.e2e.env import REAL_WAIT_S, Env

STRANGERS = 1100
SOURCES = [f"127.0.0.{n}" for n in range(2, 7)]


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
        registry = env.bridge.metrics.registry
        away = sum(
            registry.get_sample_value(
                "ftwbridge_strangers_turned_away_total", {"listener": "main", "how": how}
            )
            or 0
            for how in ("refused", "shed")
        )
        assert away >= STRANGERS - MAX_STRANGERS  # counted as what it is
        await env.add_home("h1")  # a box dials the door and authenticates
    finally:
        for stream in idle:
            await stream.aclose()


@pytest.mark.config(keep_alive_s=REAL_WAIT_S * 2)  # idle strangers are not timed out here
async def test_idle_strangers_never_keep_the_operator_from_the_admin_listener(env: Env) -> None:
    assert env.bridge.admin_url is not None
    port = int(env.bridge.admin_url.rsplit(":", 1)[1])
    idle = []
    try:
        with trio.fail_after(REAL_WAIT_S):
            idle = await _idle_strangers(port)
            async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:  # the operator
                r = await http.get(env.bridge.admin_url + "/metrics")
        assert r.status_code == 200
        with trio.fail_after(REAL_WAIT_S):
            await _until_closed(idle, STRANGERS - MAX_STRANGERS)
        registry = env.bridge.metrics.registry
        away = sum(
            registry.get_sample_value(
                "ftwbridge_strangers_turned_away_total", {"listener": "admin", "how": how}
            )
            or 0
            for how in ("refused", "shed")
        )
        assert away >= STRANGERS - MAX_STRANGERS
    finally:
        for stream in idle:
            await stream.aclose()


UPGRADE = (
    b"GET /v1/box HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
"""A box's upgrade request (RFC 6455 section 4.1), as a stranger sends it."""
DOOR_SHARE = 100
"""The door's unauthenticated uplinks in this test (the bridge's default is larger)."""


@pytest.mark.config(door_hello_s=REAL_WAIT_S * 5, door_silence_s=REAL_WAIT_S * 5)  # not what acts
async def test_a_thousand_strangers_that_never_authenticate_keep_no_box_out(env: Env) -> None:
    env.bridge.door.strangers = Slots(DOOR_SHARE, DOOR_STRANGERS_PER_SOURCE)
    sources = [f"127.0.0.{n}" for n in range(2, 12)]
    port = int(env.door_url.removesuffix("/v1/box").rsplit(":", 1)[1])  # the door's listener
    idle: list[trio.SocketStream] = []
    try:
        with trio.fail_after(REAL_WAIT_S):
            for n in range(1000):
                stream = await trio.open_tcp_stream(
                    "127.0.0.1", port, local_address=sources[n % len(sources)]
                )
                idle.append(stream)
                await stream.send_all(UPGRADE % port)
        with trio.fail_after(REAL_WAIT_S):  # all but the door's share were refused or shed
            await _until_closed(idle, len(idle) - DOOR_SHARE)
        refused = env.bridge.metrics.registry.get_sample_value(
            "ftwbridge_door_uplinks_refused_total", {"reason": "strangers"}
        )
        assert refused is not None and refused >= len(idle) - DOOR_SHARE
        home = await env.add_home("h1")  # a box dials the door and authenticates
        assert env.bridge.door.online(home.name)
    finally:
        for stream in idle:
            await stream.aclose()
