"""Pacing, bounds, drain and cancellation safety on MockClock (docs/operations.md, "Limits and what an assistant sees past them")."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.door import Door
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from stubbox.uplink import StubHome
from tests.harness import Rig
from tests.pool.test_pool import refused


@pytest.mark.config(queue_per_home=16)
async def test_sixteenth_call_waits_and_the_over_wait_is_refused(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    keys = [(await rig.grant(stub))[0] for _ in range(4)]
    start = trio.current_time()
    for i in range(15):  # the burst: no wait at all
        with trio.fail_after(1):
            await rig.pool.call("h1", keys[i % 4], Read.LIVE_GET)
    assert trio.current_time() - start < 0.01
    waited = trio.current_time()
    await rig.pool.call("h1", keys[0], Read.LIVE_GET)  # the 16th waits 1/0.75 s
    assert trio.current_time() - waited == pytest.approx(4 / 3, abs=0.005)
    # two more arrive at once: they wait 1.33 s and 2.67 s; a third would wait 4 s > 3 s
    done: list[float] = []
    t0 = trio.current_time()

    async def one(k: bytes) -> None:
        await rig.pool.call("h1", k, Read.LIVE_GET)
        done.append(trio.current_time() - t0)

    async with trio.open_nursery() as inner:
        inner.start_soon(one, keys[1])
        inner.start_soon(one, keys[2])
        await trio.testing.wait_all_tasks_blocked()
        err = await refused(rig, "h1", keys[3])
        assert err.code == Code.E_RATE_LIMITED and err.details == {"retryAfterMs": 4000}
        assert trio.current_time() == t0  # refused at once
    assert done == pytest.approx([4 / 3, 8 / 3], abs=0.005)
    assert rig.pool.pacer.refusals == 1


@pytest.mark.config(pace_calls_burst=1, pace_calls_per_s=10, queue_per_home=8)
async def test_calls_keep_their_order_per_home(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    keys = [(await rig.grant(stub))[0] for _ in range(6)]
    order: list[int] = []

    async def one(i: int) -> None:
        await rig.pool.call("h1", keys[i], Read.LIVE_GET)
        order.append(i)

    async with trio.open_nursery() as inner:
        for i in range(6):
            inner.start_soon(one, i)
            await trio.sleep(0.001)
    assert order == list(range(6))


@pytest.mark.config(pace_calls_burst=1, pace_calls_per_s=1)
async def test_cancelled_waiter_gives_its_token_back(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    await rig.pool.call("h1", agent, Read.LIVE_GET)
    with trio.move_on_after(0.5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)  # would wait 1 s
    assert rig.pool.statistics().queued == 0
    t0 = trio.current_time()
    await rig.pool.call("h1", agent, Read.LIVE_GET)
    assert trio.current_time() - t0 == pytest.approx(0.5, abs=0.005)  # not 1.5 s


@pytest.mark.config(calls_in_flight=2)
async def test_calls_in_flight_bound(rig: Rig, autojump_clock: trio.abc.Clock) -> None:
    homes = [await rig.add_home(f"h{i}", answer_delay_ms=1000) for i in range(3)]
    keys = [(await rig.grant(s))[0] for s in homes]
    finished: list[float] = []

    async def one(i: int) -> None:
        await rig.pool.call(f"h{i}", keys[i], Read.LIVE_GET)
        finished.append(trio.current_time())

    t0 = trio.current_time()
    async with trio.open_nursery() as inner:
        for i in range(3):
            inner.start_soon(one, i)
        await trio.sleep(0.5)
        assert rig.pool.statistics().calls_in_flight == 2
    assert sorted(round(t - t0, 2) for t in finished) == [1.0, 1.0, 2.0]


@pytest.mark.config(warm_sessions=2)
async def test_warm_sessions_bound_closes_least_recently_used(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    keys = [(await rig.grant(stub))[0] for _ in range(3)]
    for k in keys[:2]:
        await rig.pool.call("h1", k, Read.LIVE_GET)
    await rig.pool.call("h1", keys[0], Read.LIVE_GET)  # keys[1] is now least recently used
    await rig.pool.call("h1", keys[2], Read.LIVE_GET)
    await trio.sleep(0.1)
    stats = rig.pool.statistics()
    assert stats.sessions == 2 and stats.drops == {"idle": 1}
    assert stub.box.session_count == 2  # the box heard tun.end for the evicted one
    for k in (keys[0], keys[2]):  # both still warm: calling them evicts nobody
        await rig.pool.call("h1", k, Read.LIVE_GET)
    assert rig.pool.statistics().drops == {"idle": 1}


@pytest.mark.stub(answer_delay_ms=2000)
async def test_drain_finishes_calls_then_closes_sessions(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    idle, _ = await rig.grant(stub)
    await rig.pool.call("h1", idle, Read.LIVE_GET)  # a warm, idle session
    results: list[Any] = []

    async def caller() -> None:
        results.append(await rig.pool.call("h1", agent, Read.LIVE_GET))

    async with trio.open_nursery() as inner:
        inner.start_soon(caller)
        await trio.sleep(0.5)
        t0 = trio.current_time()
        await rig.pool.drain(10)
        assert trio.current_time() - t0 == pytest.approx(1.5, abs=0.01)
    assert results[0].t == "live"  # the call in flight finished
    stats = rig.pool.statistics()
    assert (stats.sessions, stats.calls_in_flight, stats.queued) == (0, 0, 0)
    assert stats.drops == {"restarting": 2}
    assert stub.box.session_count == 0
    err = await refused(rig, "h1", agent)
    assert err.details == {"reason": "restarting"}


class _CheckpointDoor(Door):
    """A door whose `open_tun` (and the tunnel's send and receive) count checkpoints."""

    checkpoint: Any = None

    async def open_tun(self, home: str) -> Any:
        type(self).checkpoint()
        t = await super().open_tun(home)
        real_send, real_receive = t.send, t.receive

        async def send(d: bytes) -> bool:
            type(self).checkpoint()
            return await real_send(d)

        async def receive() -> bytes:
            d = await real_receive()
            type(self).checkpoint()
            return d

        t.send, t.receive = send, receive  # type: ignore[method-assign]
        return t


@pytest.mark.parametrize("step", range(7))
async def test_session_dropped_at_each_opening_checkpoint_leaves_nothing(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock, step: int
) -> None:
    door_cls = type("D", (_CheckpointDoor,), {})
    rig = Rig(nursery, door_cls=door_cls)
    await rig.start()
    stub = await rig.add_home()
    key, _ = await rig.grant(stub)
    seen = 0
    real_begin, real_finish = rig.keys.begin, rig.keys.finish

    def checkpoint() -> None:
        nonlocal seen
        seen += 1
        if seen == step + 1:
            for w in list(rig.pool._sessions.values()):
                w.close("revoked")

    door_cls.checkpoint = staticmethod(checkpoint)

    async def begin(k: bytes, noise: bytes) -> Any:
        r = await real_begin(k, noise)
        checkpoint()
        return r

    async def finish(h: int, m2: bytes) -> Any:
        r = await real_finish(h, m2)
        checkpoint()
        return r

    rig.keys.begin, rig.keys.finish = begin, finish  # type: ignore[method-assign]
    try:
        with trio.fail_after(10):
            await rig.pool.call("h1", key, Read.LIVE_GET)
    except Refusal as exc:
        assert exc.code in (Code.E_GRANT_REVOKED, Code.E_UNAVAILABLE)
    await trio.sleep(1)
    stats = rig.pool.statistics()
    assert (stats.opening, stats.calls_in_flight, stats.queued) == (0, 0, 0)
    assert rig.keys.pending_handshakes == 0
    assert sum(len(u.tuns) for u in rig.door._uplinks.values()) == stats.sessions
    assert stub.box.session_count == stats.sessions
