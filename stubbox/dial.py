"""Dial a stub home's uplink and keep it up (PROTOCOL.md part C).

`run_uplink(stub, url)` keeps an uplink to `url` (ws://.../v1/box) and reconnects with
jittered exponential backoff (0.5 s doubling to 30 s) until the stub stops. `url` may name
several doors separated by commas (the instances of a cluster): each lost uplink moves on to
the next, round the list.
"""

from __future__ import annotations

import random

import trio
from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url
from wsproto.utilities import LocalProtocolError as WsLocalError

from ftwbridge.proto.errors import ProtocolError

from .uplink import StubHome, log


async def run_uplink(stub: StubHome, url: str) -> None:
    """Keep `stub`'s uplink to `url` (one door URL, or several separated by commas, tried in
    turn) up until cancelled, reconnecting with jittered backoff."""
    urls = [u.strip() for u in url.split(",") if u.strip()] or [url]
    backoff_s = 0.5
    turn = -1
    while not stub.stopping:
        turn += 1
        url = urls[turn % len(urls)]
        try:
            async with open_websocket_url(url, message_queue_size=64, max_message_size=65536) as ws:
                backoff_s = 0.5
                await stub.run_session(ws)
        except (HandshakeError, ConnectionClosed, OSError, ProtocolError, WsLocalError) as exc:
            # WsLocalError: trio-websocket answers a Ping that arrives while the connection is
            # closing, which wsproto refuses, and lets that out (python-trio/trio-websocket#184,
            # open); a stub resumed after SIGSTOP met it. The uplink is lost, not the box.
            log.info("uplink for %s lost: %s", stub.home, type(exc).__name__)
        if stub.stopping:
            return
        await trio.sleep(backoff_s * random.uniform(0.5, 1.5))
        backoff_s = min(backoff_s * 2, 30.0)
