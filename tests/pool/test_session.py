"""The pooled session's states (docs/architecture.md, "A pooled session's states") and what the box has not
finished: a call that gives up leaves the session busy until the box answers, so the next call is
never sent behind unfinished work; the queue's retry hint comes from what the bridge saw.
MockClock (autojump) throughout; the box is the real stub over memory links."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from ftwbridge.config import Config
from ftwbridge.pool.session import TRANSITIONS, Move, PooledSession, State
from ftwbridge.proto.errors import LocalProtocolError
from ftwbridge.proto.names import Code, Read
from stubbox.uplink import StubHome
from tests.harness import Rig
from tests.pool.test_pool import refused


class _Owner:
    def __init__(self) -> None:
        self.closed: list[PooledSession] = []
        self.released = 0

    def session_closed(self, s: PooledSession) -> None:
        self.closed.append(s)

    def session_released(self, s: PooledSession) -> None:
        self.released += 1

    def box_done(self, s: PooledSession, answered: bool) -> None:
        pass


def test_the_table_allows_only_the_drawn_moves() -> None:
    """Every (state, move) pair not in the table is refused as a bug, not acted on."""
    drawn = {
        (State.OPENING, Move.OPENED),
        (State.READY, Move.TAKE),
        (State.BUSY, Move.RELEASE),
        (State.OPENING, Move.CLOSE),
        (State.READY, Move.CLOSE),
        (State.BUSY, Move.CLOSE),
        (State.CLOSING, Move.END),
    }
    assert set(TRANSITIONS) == drawn
    for state in State:
        for move in Move:
            if (state, move) in drawn:
                continue
            s = PooledSession(_Owner(), "h1", b"k" * 32)
            s.state = state
            with pytest.raises(LocalProtocolError):
                s._move(move)


async def test_waiters_are_served_in_order_and_a_cancelled_one_leaves_no_trace() -> None:
    owner = _Owner()
    s = PooledSession(owner, "h1", b"k" * 32)
    s.opened()
    assert s.is_available and owner.released == 1
    await s.acquire()
    assert s.state is State.BUSY
    order: list[int] = []

    async def caller(n: int) -> None:
        await s.acquire()
        order.append(n)
        s.release()

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(caller, n)
            await trio.testing.wait_all_tasks_blocked()  # parked in this order
        with trio.CancelScope() as gone:
            gone.cancel()
            await s.acquire()  # cancelled before it parks: takes nothing
        assert s.waiting == 3
        s.release()  # handed to caller 0, then 1, then 2
    assert order == [0, 1, 2]
    assert s.is_available and s.holder is None
    s.close("revoked")
    assert s.is_closed and owner.closed == [s]
    s.close("idle")  # the first reason stays
    assert s.end_reason == "revoked"


async def test_parked_calls_wake_when_the_session_closes() -> None:
    s = PooledSession(_Owner(), "h1", b"k" * 32)
    woke: list[bool] = []

    async def caller() -> None:
        await s.acquire()
        woke.append(s.holder is trio.lowlevel.current_task())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        s.close("uplink_lost")
    assert woke == [False, False]


async def _hang_up(rig: Rig, key: bytes, after_s: float) -> None:
    with trio.move_on_after(after_s):
        await rig.pool.call("h1", key, Read.LIVE_GET)


@pytest.mark.config(pace_calls_burst=100, queue_per_home=16)
@pytest.mark.stub(answer_delay_ms=3000, read_limit=False)
async def test_hang_ups_do_not_stack_work_at_a_slow_box(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """Ten clients hang up on a box that takes 3 s a read; the next call takes
    at most the rest of the one read the box is doing plus its own, not the sum of all ten."""
    await rig.pool.call("h1", agent, Read.LIVE_GET)  # warm
    reads_before = stub.box.stats.reads
    for _ in range(10):
        await _hang_up(rig, agent, 0.5)
    assert rig.pool.statistics().calls_in_flight == 1  # the first hang-up's read, at the box
    t0 = trio.current_time()
    with trio.fail_after(Config().call_deadline_s):
        reply = await rig.pool.call("h1", agent, Read.LOADPOINTS_GET)
    assert reply.t == "loadpoints"
    assert trio.current_time() - t0 <= 6.0
    assert stub.box.stats.reads - reads_before <= 3  # no read was sent behind unfinished work
    assert rig.pool.statistics().calls_in_flight == 0


@pytest.mark.config(queue_per_home=1, pace_calls_burst=100)
@pytest.mark.stub(read_limit=False)
async def test_a_stalled_home_gets_an_honest_retry_hint(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """During a stall the queue-full refusal's hint grows with how long the box has been
    silent, instead of saying one pacing interval ("try again in 2 s" for 30 s)."""
    await rig.pool.call("h1", agent, Read.LIVE_GET)
    stub.hold = True  # the box stops answering
    hints: list[Any] = []
    async with trio.open_nursery() as inner:
        inner.start_soon(lambda: rig.pool.call("h1", agent, Read.LIVE_GET))
        await trio.sleep(0.1)
        inner.start_soon(lambda: rig.pool.call("h1", agent, Read.LIVE_GET))
        for wait in (1, 9):
            await trio.sleep(wait)
            err = await refused(rig, "h1", agent)
            assert err.code == Code.E_RATE_LIMITED
            hints.append(err.retry_after_ms)
        inner.cancel_scope.cancel()
    assert hints[0] >= 1000 and hints[1] >= 10_000
    assert all(h <= 1000 * Config().call_deadline_s for h in hints)


@pytest.mark.stub(answer_delay_ms=2000)
async def test_the_box_answering_late_frees_the_session_for_the_next_call(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    await rig.pool.call("h1", agent, Read.LIVE_GET)
    await _hang_up(rig, agent, 0.5)
    (s,) = rig.pool._sessions.values()
    assert s.is_abandoned
    await trio.sleep(2)
    assert s.is_available and rig.pool.statistics().calls_in_flight == 0
    reply = await rig.pool.call("h1", agent, Read.LOADPOINTS_GET)
    assert reply.t == "loadpoints"
    assert rig.pool.statistics().drops == {}  # the same session served both


async def test_a_refusal_from_the_box_frees_the_session(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key, _ = await rig.grant(stub, scopes=("ftw.live.read",))
    err = await refused(rig, "h1", key, Read.LOADPOINTS_GET)
    assert err.code == Code.E_SCOPE_DENIED
    reply = await rig.pool.call("h1", key, Read.LIVE_GET)
    assert reply.t == "live"
    stats = rig.pool.statistics()
    assert (stats.sessions, stats.busy, stats.calls_in_flight) == (1, 0, 0)
