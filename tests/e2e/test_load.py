"""Many calls lose nothing: real bridge, real stub boxes, traffic faster than the limits allow.

Every call must end within its deadline with a result or `E_RATE_LIMITED`; the door drops
nothing; no box ever refuses paced traffic (neither its 60-per-minute limit nor a second
request in flight on one session); the pool's and door's counts are back to rest afterwards.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import httpx2
import trio

from ftwbridge.config import Config

from .env import Env, Home
from .test_access import MODERN, call_body

DEADLINE_S = 25.0
KEEP_ALIVE_S = Config().keep_alive_s
"""The bridge's idle close of a kept-alive connection, seconds."""
CLIENT_BOUND_S = 480.0
"""A sanity bound on the client's own clock, which also counts waiting for one of its pooled
connections and for the bridge to read the request: all calls start at once, so the slowest
one takes about as long as the whole run. 2000 calls take some 28 s on an idle machine
(client, bridge and stub fleet share its two cores); with two busy loops beside a machine
already loaded they took 133 s (2026-12-01), and `make test`'s other workers load it more.
The server's 25 s deadline is checked by the outcomes: a call past it would have ended
E_UNAVAILABLE {timeout}, which is not an allowed outcome."""


async def fire(
    env: Env, tokens: list[str], calls: int, *, connections: int = 64
) -> tuple[Counter[str], float, float]:
    """`calls` tools/call `status` spread over `tokens`, all at once; returns (outcomes,
    slowest call in s, wall time in s)."""
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    # a connection idle for the bridge's keep_alive_s (5 s) is closed by it; one the client
    # reuses at that instant carries a request that gets no answer ("Server disconnected
    # without sending a response"), which an overloaded machine made happen: the client
    # drops idle connections at half that, as the mesh's forwarding client does
    limits = httpx2.Limits(
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=KEEP_ALIVE_S / 2,
    )
    headers = MODERN | {"mcp-method": "tools/call", "mcp-name": "status"}
    start = time.monotonic()
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(CLIENT_BOUND_S), limits=limits) as http:

        async def one(i: int) -> None:
            nonlocal slowest
            t0 = time.monotonic()
            r = await http.post(
                env.url,
                content=json.dumps(call_body("status", rid=i)),
                headers=headers | {"authorization": f"Bearer {tokens[i % len(tokens)]}"},
            )
            slowest = max(slowest, time.monotonic() - t0)
            result = r.json().get("result", {})
            if r.status_code != 200:
                outcomes[f"http {r.status_code}"] += 1
            elif result.get("isError"):
                outcomes[result["_meta"]["ftwbridge/error"]["code"]] += 1
            else:
                outcomes["ok"] += 1

        async with trio.open_nursery() as nursery:
            for i in range(calls):
                nursery.start_soon(one, i)
    return outcomes, slowest, time.monotonic() - start


async def box_refusals(homes: list[Home]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for home in homes:
        status: Any = await home.console(op="status")
        total.update(status["refusals"])
    return dict(total)


async def check_at_rest(env: Env) -> None:
    stats = env.bridge.pool.statistics()
    assert (stats.calls_in_flight, stats.queued, stats.opening) == (0, 0, 0)
    assert env.bridge.door.stats.dropped_to_box == 0 and env.bridge.door.stats.dropped_from_box == 0


async def test_200_calls_from_8_agents_on_one_home(env: Env) -> None:
    home = await env.add_home("h1", "--delay-ms", "50")  # each read busies its session 50 ms
    tokens = [(await env.agent(home))[2] for _ in range(8)]
    outcomes, slowest, took = await fire(env, tokens, 200)
    print(
        f"\n200 calls, 8 agents, 1 home: {dict(outcomes)} slowest {slowest:.2f} s, all in {took:.2f} s"
    )
    assert set(outcomes) <= {"ok", "E_RATE_LIMITED"} and sum(outcomes.values()) == 200
    assert outcomes["ok"] >= 5  # the queue of 4 per home refuses most of a burst at once
    assert slowest < CLIENT_BOUND_S
    assert await box_refusals([home]) == {}
    await check_at_rest(env)


async def test_2000_calls_across_50_homes(env: Env) -> None:
    homes = await env.add_fleet("f", 50, "--delay-ms", "20")
    tokens = []
    for home in homes:
        for _ in range(2):
            tokens.append((await env.agent(home))[2])
    outcomes, slowest, took = await fire(env, tokens, 2000, connections=800)
    print(
        f"\n2000 calls, 100 agents, 50 homes: {dict(outcomes)} slowest {slowest:.2f} s, all in {took:.2f} s"
    )
    assert set(outcomes) <= {"ok", "E_RATE_LIMITED"} and sum(outcomes.values()) == 2000
    assert outcomes["ok"] >= 50 * 5
    assert slowest < CLIENT_BOUND_S
    assert await box_refusals(homes) == {}
    await check_at_rest(env)
