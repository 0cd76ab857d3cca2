"""Live feeds in the pool (pool/feed.py) against the stub box in memory, on MockClock (autojump):
counted references, the rebuilt `live` answer, no box read per update, reads beside the
stream, the idle close held off while referenced, resyncs, and the ends every holder hears."""

from __future__ import annotations

import pytest
import trio

from ftwbridge.proto.names import Read, Scope
from ftwbridge.proto.session import Push
from ftwbridge.proto.telemetry import TelemetryMsg
from stubbox.uplink import StubHome
from tests.harness import Rig


async def _changed(w: object) -> None:
    with trio.fail_after(30):
        await w.changed.wait()  # type: ignore[attr-defined]


async def test_a_feed_rebuilds_live_without_box_reads(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    feeds = rig.pool.feeds
    async with feeds.watch("h1", agent) as w:
        await _changed(w)
        w.take()
        await trio.sleep(30)  # thirty pulses at 1 Hz
        assert feeds.stats.updates >= 30 and feeds.stats.box_reads == 0
        reads = stub.box.stats.reads
        view = rig.pool.live_view("h1", agent)
        assert view is not None
        stub.box.frozen_ms = None
        reply = await rig.pool.call("h1", agent, Read.LIVE_GET)  # a read beside the stream
        assert stub.box.stats.reads == reads + 1
        for key in ("controlRev", "mode", "dispatchBlockedBy"):
            assert view[key] == reply.body[key], key
        states = {k: v["state"] for k, v in reply.body["sources"].items()}
        assert {k: v["state"] for k, v in view["sources"].items()} == states  # as last sent
        assert set(view["fields"]) == set(reply.body["fields"])


async def test_two_references_share_one_feed_and_one_sub(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    feeds = rig.pool.feeds
    async with feeds.watch("h1", agent) as a, feeds.watch("h1", agent) as b:
        await _changed(a)
        await _changed(b)
        assert a.feed is b.feed and feeds.stats.started == 1
        assert len(stub.box.streams) == 1


@pytest.mark.config(idle_close_s=10)
async def test_a_referenced_feed_keeps_its_session_from_the_idle_close(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    feeds = rig.pool.feeds
    async with feeds.watch("h1", agent) as w:
        await _changed(w)
        await trio.sleep(45)
        assert rig.pool.statistics().sessions == 1 and not w.ended.is_set()
    await trio.sleep(25)  # the last reference went: the ordinary idle close
    assert rig.pool.statistics().sessions == 0
    assert rig.pool.live_view("h1", agent) is None
    async with feeds.watch("h1", agent) as w:  # a new reference starts a new feed
        await _changed(w)
        assert feeds.stats.started == 2


async def test_a_gap_resyncs_with_one_live_get(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    feeds = rig.pool.feeds
    async with feeds.watch("h1", agent) as w:
        await _changed(w)
        await trio.sleep(2.5)  # a pulse or two came
        seq = w.feed.mirror.seq
        assert seq is not None
        w.feed.on_push(Push(TelemetryMsg.TICK.value, {"seq": seq + 5}))  # as if the door dropped 4
        assert rig.pool.live_view("h1", agent) is None  # not whole until the resync
        reads = stub.box.stats.reads
        with trio.fail_after(30):
            while feeds.stats.box_reads == 0:
                await w.changed.wait()
                w.take()
        assert stub.box.stats.reads == reads + 1 and feeds.stats.resyncs == {"gap": 1}
        await trio.sleep(3)
        assert rig.pool.live_view("h1", agent) is not None and feeds.stats.box_reads == 1


@pytest.mark.stub(answer_delay_ms=2500)
async def test_frames_during_a_resync_ask_for_no_second_one(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    feeds = rig.pool.feeds
    async with feeds.watch("h1", agent) as w:
        await _changed(w)
        await trio.sleep(2.5)
        seq = w.feed.mirror.seq
        assert seq is not None
        w.feed.on_push(Push(TelemetryMsg.TICK.value, {"seq": seq + 5}))
        await trio.sleep(10)  # the live.get takes 2.5 s; pulses come meanwhile
        assert feeds.stats.box_reads == 1 and feeds.stats.resyncs == {"gap": 1}
        assert rig.pool.live_view("h1", agent) is not None


async def test_revocation_ends_the_feed_and_says_why(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    async with rig.pool.feeds.watch("h1", agent) as w:
        await _changed(w)
        await stub.drop_agent(agent)
        with trio.fail_after(10):
            await w.ended.wait()
        assert w.end_reason == "revoked"


async def test_a_box_refusal_of_the_sub_ends_the_feed_with_its_code(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key, _ = await rig.grant(stub, scopes=(Scope.FTW_PLAN_READ.value,))
    async with rig.pool.feeds.watch("h1", key) as w:
        with trio.fail_after(30):
            await w.ended.wait()
        assert w.end_reason == "E_SCOPE_DENIED"


async def test_a_lost_uplink_ends_feeds(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    async with rig.pool.feeds.watch("h1", agent) as w:
        await _changed(w)
        await stub.drop_uplink()
        with trio.fail_after(10):
            await w.ended.wait()
        assert w.end_reason == "uplink_lost"


async def test_a_drain_ends_feeds_restarting(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    async with rig.pool.feeds.watch("h1", agent) as w:
        await _changed(w)
        await rig.pool.drain(1)
        assert w.ended.is_set() and w.end_reason == "restarting"
    async with rig.pool.feeds.watch("h1", agent) as w:  # no feed starts while draining
        assert w.ended.is_set() and w.end_reason == "restarting"


@pytest.mark.config(pace_calls_burst=1, pace_calls_per_s=0.05, pace_wait_s=0)
async def test_a_resync_refused_for_pacing_waits_its_turn(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    feeds = rig.pool.feeds
    async with feeds.watch("h1", agent) as w:  # the sub took the home's one pacing turn
        await _changed(w)
        await trio.sleep(2.5)
        seq = w.feed.mirror.seq
        assert seq is not None
        w.feed.on_push(Push(TelemetryMsg.TICK.value, {"seq": seq + 5}))
        await trio.sleep(5)
        assert feeds.stats.box_reads == 0 and not w.ended.is_set()  # refused, waiting
        await trio.sleep(40)
        assert feeds.stats.box_reads == 1 and not w.ended.is_set()
        assert rig.pool.live_view("h1", agent) is not None


@pytest.mark.config(warm_sessions=1)
async def test_a_referenced_feed_is_not_evicted_for_room(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    other, _ = await rig.grant(stub)
    async with rig.pool.feeds.watch("h1", agent) as w:
        await _changed(w)
        await rig.pool.call("h1", other, Read.LIVE_GET)  # another agent needs a session
        assert not w.ended.is_set()
        await trio.sleep(3)
        assert rig.pool.live_view("h1", agent) is not None


@pytest.mark.config(idle_close_s=10)
async def test_a_lease_keeps_a_feed_for_its_time_and_a_later_one_moves_its_end(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """A reader that polls (the home view's live tool) leases the feed: it starts at the first
    lease, each later lease moves its end, and once the last lease ends the reference goes and
    the session meets its ordinary idle close. No box read is made for any of it."""
    feeds = rig.pool.feeds
    feeds.lease("h1", agent, 30)
    await trio.sleep(5)
    assert rig.pool.live_view("h1", agent) is not None and feeds.stats.running == 1
    await trio.sleep(20)  # t = 25
    feeds.lease("h1", agent, 30)  # polled again: the reference lasts until t = 55
    feeds.lease("h1", agent, 1)  # a shorter lease never brings the end nearer
    await trio.sleep(25)  # t = 50: the idle close (10 s) has not come, the feed is referenced
    assert rig.pool.statistics().sessions == 1 and feeds.stats.started == 1
    assert len(stub.box.streams) == 1
    await trio.sleep(20)  # t = 70: the lease ended at 55, the idle close at 65
    assert rig.pool.statistics().sessions == 0
    assert rig.pool.live_view("h1", agent) is None
    assert feeds.stats.box_reads == 0
