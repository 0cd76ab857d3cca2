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
    failed = 0  # attempts in a row that did not get in
    while not stub.stopping:
        turn += 1
        url = urls[turn % len(urls)]
        try:
            async with open_websocket_url(url, message_queue_size=64, max_message_size=65536) as ws:
                backoff_s = 0.5
                failed = 0
                await stub.run_session(ws)
        except (HandshakeError, ConnectionClosed, OSError, ProtocolError, WsLocalError) as exc:
            # WsLocalError: trio-websocket answers a Ping that arrives while the connection is
            # closing, which wsproto refuses, and lets that out (python-trio/trio-websocket#184,
            # open); a stub resumed after SIGSTOP met it. The uplink is lost, not the box.
            log.info("uplink for %s lost: %s", stub.home, type(exc).__name__)
            refused = _refused(exc)
            if refused is not None:
                log.warning("the door at %s refused home %s: %s", url, stub.home, refused)
            elif isinstance(exc, (OSError, HandshakeError)):
                failed += 1
                if failed % 10 == 1:  # the first failure, then every tenth: the stub goes on
                    log.warning(
                        "home %s cannot reach the door at %s (%s); retrying with backoff",
                        stub.home,
                        url,
                        _reason(exc),
                    )
        if stub.stopping:
            return
        await trio.sleep(backoff_s * random.uniform(0.5, 1.5))
        backoff_s = min(backoff_s * 2, 30.0)


REFUSALS = {
    4401: "its signature does not verify with the key the bridge holds for it; enroll this"
    " box's key again (`ftwbridge home enroll`, the key from `python -m stubbox --print-key`)",
    4403: "the bridge does not know this home; enroll it (`ftwbridge home enroll`)",
}
"""The door's Close codes that mean this box is not let in (PROTOCOL.md part C), in words."""


def _refused(exc: BaseException) -> str | None:
    """Words for a door that closed this uplink because it will not let this box in."""
    if isinstance(exc, ConnectionClosed) and exc.reason is not None:
        return REFUSALS.get(exc.reason.code or 0)
    return None


def _reason(exc: BaseException) -> str:
    """A short cause of a failed dial: the OS's words, or the HTTP status of a refused upgrade
    with the first line of its answer (the bridge's main port names the door's there)."""
    cause = exc.__cause__ if isinstance(exc, HandshakeError) else exc
    if isinstance(cause, OSError):
        return str(cause.strerror or cause)
    status = getattr(exc, "status_code", None)  # trio-websocket's ConnectionRejected
    if not status:
        return type(exc).__name__
    body = getattr(exc, "body", None)
    words = body.decode("utf-8", "replace").strip().split("\n")[0][:300] if body else ""
    return f"the upgrade was answered HTTP {status}" + (f": {words}" if words else "")
