"""A listen stream's timing on MockClock (autojump), over the pool's live feed and the stub box
in memory: the acknowledgement first, readings paced to `listen_min_interval_s`, a notable
change sent at once, keep-alives filling the quiet, and the refusal at a home held elsewhere."""

from __future__ import annotations

import itertools
import json

import trio

from ftwbridge.config import Config
from ftwbridge.mcp.inbound import Route
from ftwbridge.mcp.listen import Listens
from ftwbridge.mcp.listen_rules import KEEP_ALIVE, live_uri
from ftwbridge.mcp.server import HttpResponse
from ftwbridge.proto.names import Mode
from ftwbridge.store import TokenRecord
from stubbox.uplink import StubHome
from tests.harness import BASE_MS, Rig

HOUR_MS = 3_600_000
ACCEPT = {"accept": ["application/json, text/event-stream"]}


def _route(rid: str = "r1") -> Route:
    filt = {"resourceSubscriptions": [live_uri("h1")]}
    return Route("modern", "2026-07-28", "subscriptions/listen", {"notifications": filt}, rid)


def _token(rig: Rig, agent: bytes) -> TokenRecord:
    scopes = ("ftw.live.read",)
    return TokenRecord("h1", "a1", agent, scopes, "r", "c", rig.bridge_ms() + 3_600_000)


def _kind(chunk: bytes) -> str:
    if chunk == KEEP_ALIVE:
        return "keep-alive"
    message = json.loads(chunk.split(b"data: ", 1)[1])
    return str(message.get("method", "result"))


async def test_pacing_notable_changes_and_keepalives(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    config = Config(listen_min_interval_s=5.0, listen_keepalive_s=15.0)
    listens = Listens(feeds=rig.pool.feeds, config=config, wall_ms=rig.bridge_ms)
    stub.box.frozen_ms = BASE_MS  # nothing moves
    resp = await listens.open(_route(), _token(rig, agent), ACCEPT)
    assert resp.stream is not None and resp.headers["x-accel-buffering"] == "no"
    seen: list[tuple[float, str]] = []

    async def write(chunk: bytes) -> None:
        seen.append((trio.current_time(), _kind(chunk)))

    async def home_moves() -> None:
        await trio.sleep(50)  # quiet first
        stub.box.home.controls.set_mode(Mode.IDLE.value)  # notable: goes at once
        await trio.sleep(10)
        for k in range(1, 21):  # readings move on every pulse for 20 s
            stub.box.frozen_ms = BASE_MS + k * HOUR_MS
            await trio.sleep(1)
        listens.drain()

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(home_moves)
        with trio.fail_after(120):
            await resp.stream(write)
    kinds = [k for _t, k in seen]
    assert kinds[0] == "notifications/subscriptions/acknowledged" and seen[0][0] == start
    assert kinds[-1] == "result"  # the drain's graceful end
    quiet = [t for t, k in seen if k == "keep-alive" and t < start + 50]
    assert len(quiet) >= 2 and all(b - a >= 15 for a, b in itertools.pairwise(quiet))
    updates = [t - start for t, k in seen if k == "notifications/resources/updated"]
    assert updates[0] < 2  # the first snap
    notable = [t for t in updates if 50 <= t < 52]
    assert notable, updates  # the mode moved: at once, not after the interval
    moving = [t for t in updates if t >= 60]
    assert len(moving) >= 3
    assert all(b - a >= 5 for a, b in itertools.pairwise(moving))
    assert rig.pool.feeds.stats.box_reads == 0


async def test_a_home_held_elsewhere_is_refused_in_words(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    async def elsewhere(home: str) -> bool:
        return True

    listens = Listens(
        feeds=rig.pool.feeds, config=Config(), wall_ms=rig.bridge_ms, held_elsewhere=elsewhere
    )
    resp = await listens.open(_route("x"), _token(rig, agent), ACCEPT)
    assert isinstance(resp, HttpResponse) and resp.stream is None
    assert resp.status == 503 and resp.headers["retry-after"] == "5"
    body = json.loads(resp.body)
    assert body["id"] == "x" and "another instance holds it" in body["error"]["message"]
    assert listens.open_streams == 0


async def test_a_takeover_elsewhere_ends_the_stream_without_a_result(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    moved = False

    async def elsewhere(home: str) -> bool:
        return moved

    listens = Listens(
        feeds=rig.pool.feeds, config=Config(), wall_ms=rig.bridge_ms, held_elsewhere=elsewhere
    )
    resp = await listens.open(_route(), _token(rig, agent), ACCEPT)
    assert resp.stream is not None
    kinds: list[str] = []

    async def write(chunk: bytes) -> None:
        kinds.append(_kind(chunk))

    async def take_over() -> None:
        nonlocal moved
        await trio.sleep(10)
        moved = True  # the box now dials another instance
        await stub.drop_uplink()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take_over)
        with trio.fail_after(60):
            await resp.stream(write)
    assert kinds[0] == "notifications/subscriptions/acknowledged"
    assert "result" not in kinds  # no graceful end: the client listens again
