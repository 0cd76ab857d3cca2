"""`subscriptions/listen` with the official Python client (mcp 2.3) against a real bridge and a
stub home process: the acknowledgement, updates from the live feed without box reads, the
graceful end of a drain, and the stream lost when the owner withdraws the grant."""

from __future__ import annotations

import pytest
import trio
from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost

from ftwbridge.mcp.listen_rules import live_uri

from ..e2e.env import REAL_WAIT_S, Env

FAST = {"listen_min_interval_s": 1.0, "live_feed_hz": 1.0}


@pytest.mark.config(**FAST)
async def test_the_official_client_listens_to_live(env: Env) -> None:
    home = await env.add_home("h 1/x")  # a home id that needs percent-encoding
    _key, _agent, token = await env.agent(home)
    uri = live_uri(home.name)
    assert uri == "ftw://home/h%201%2Fx/live"
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            async with client.listen(resource_subscriptions=[uri, "ftw://home/other/live"]) as sub:
                assert sub.honored.resource_subscriptions == [uri]  # a foreign URI is left out
                events = []
                async for event in sub:
                    events.append(event)
                    if len(events) == 2:
                        break
    assert all(isinstance(e, ResourceUpdated) and e.uri == uri for e in events)
    feeds = env.bridge.pool.feeds.stats
    assert feeds.updates >= 1 and feeds.box_reads == 0
    async with env.http() as http:
        text = (await http.get(f"{env.bridge.admin_url}/metrics")).text
    assert "ftwbridge_feed_box_reads_total 0.0" in text
    assert "ftwbridge_listen_updates_total" in text and "ftwbridge_listen_streams" in text


@pytest.mark.config(**FAST)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_drain_ends_the_stream_gracefully(env: Env) -> None:
    # mcp 2.3's client stops reading its SSE generators at a response (`_handle_sse_response`
    # breaks out of `async for sse in event_source`) without closing them: the GC warns.
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    uri = live_uri(home.name)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            async with client.listen(resource_subscriptions=[uri]) as sub:
                first = await sub.__anext__()
                assert isinstance(first, ResourceUpdated)
                env.bridge.listens.drain()
                rest = [e async for e in sub]  # ends without SubscriptionLost: graceful
    assert all(isinstance(e, ResourceUpdated) for e in rest)


@pytest.mark.config(**FAST)
async def test_a_withdrawn_grant_ends_the_stream_without_a_result(env: Env) -> None:
    home = await env.add_home("h1")
    key, _agent, token = await env.agent(home)
    uri = live_uri(home.name)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            async with client.listen(resource_subscriptions=[uri]) as sub:
                await sub.__anext__()
                await home.console(op="drop_agent", key=key.hex())
                with pytest.raises(SubscriptionLost):
                    async for _event in sub:
                        pass


@pytest.mark.config(**FAST)
async def test_a_lost_uplink_keeps_the_stream_until_the_home_is_back(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    uri = live_uri(home.name)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            async with client.listen(resource_subscriptions=[uri]) as sub:
                await sub.__anext__()
                started = env.bridge.pool.feeds.stats.started
                await home.console(op="drop_uplink")  # the box redials by itself
                stale = await sub.__anext__()  # the home went stale: one update, no end
                assert isinstance(stale, ResourceUpdated)
                while env.bridge.pool.feeds.stats.started == started:
                    await sub.__anext__()  # updates go on once a new feed runs
                # The new feed's first picture may have come with the stale one, in one
                # update; the box's meter moves every second (stubbox/flicker.py), so the new
                # feed's own pulses bring the next one, at any hour.
                assert isinstance(await sub.__anext__(), ResourceUpdated)


@pytest.mark.config(**FAST, token_ttl_s=3)
async def test_an_expired_token_ends_the_stream_without_a_result(env: Env) -> None:
    home = await env.add_home("h1")
    _key, _agent, token = await env.agent(home)
    async with env.http(token) as http, env.client(http, "2026-07-28") as client:
        with trio.fail_after(REAL_WAIT_S):
            async with client.listen(resource_subscriptions=[live_uri(home.name)]) as sub:
                with pytest.raises(SubscriptionLost):
                    async for _event in sub:
                        pass
