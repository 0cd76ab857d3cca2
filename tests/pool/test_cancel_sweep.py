"""A warm call cancelled at each of its own cancellation points, one point per call.

Some places where a cancellation can land do not yield (`checkpoint_if_cancelled` raises only
for a cancelled caller), so a sweep over scheduler turns alone would miss them. This one counts
both: each `checkpoint_if_cancelled` the calling task passes, and each turn it takes. Whichever
point the cancellation lands on, what the pool says must match what the box got: a call
cancelled before its request left leaves the session free at once and nothing in flight; one
cancelled after leaves the session BUSY with its slot until the box's answer comes and is
dropped. The agent's next call is served promptly on the same session either way; with the
socket's write lock free or held by another send (then the wait for it is one more point, and
sends nothing). MockClock (autojump); real door, pool, keys part and stub box over memory links
(`tests.harness.Link`, which keeps `LeanSocket`'s write rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.pool.session import State
from ftwbridge.proto.names import Read
from stubbox.uplink import StubHome
from tests.harness import Link, Rig

MAX_POINTS = 40
"""More cancellation points than a warm call passes (the sweep checks it got to the end)."""


class _Points(trio.abc.Instrument):
    """Counts the cancellation points `task` reaches and cancels `scope` at the `at`-th: a
    `checkpoint_if_cancelled` raises there; a scheduler turn lands the cancellation at the
    task's next point."""

    def __init__(self, scope: trio.CancelScope, at: int) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.scope, self.at, self.seen = scope, at, 0

    def point(self) -> None:
        if trio.lowlevel.current_task() is self.task:
            self.seen += 1
            if self.seen == self.at:
                self.scope.cancel()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.seen += 1
            if self.seen == self.at:
                self.scope.cancel()


@contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch, points: _Points) -> Iterator[None]:
    real: Callable[[], Any] = trio.lowlevel.checkpoint_if_cancelled

    async def checkpoint_if_cancelled() -> None:
        points.point()
        await real()

    with monkeypatch.context() as patch:
        patch.setattr(trio.lowlevel, "checkpoint_if_cancelled", checkpoint_if_cancelled)
        trio.lowlevel.add_instrument(points)
        try:
            yield
        finally:
            trio.lowlevel.remove_instrument(points)


async def _call_cancelled_at(
    rig: Rig, agent: bytes, at: int, monkeypatch: pytest.MonkeyPatch
) -> bool:
    """A warm call cancelled at its `at`-th cancellation point; False if it ended first."""
    scope = trio.CancelScope()
    points = _Points(scope, at)
    done = False
    with _counting(monkeypatch, points):
        with scope:
            points.task = trio.lowlevel.current_task()
            await rig.pool.call("h1", agent, Read.LIVE_GET)
            done = True
        points.task = None
    return not done


@pytest.mark.parametrize("lock", ["free", "held"])
async def test_a_warm_call_cancelled_at_each_point_leaves_what_the_box_got(
    lock: str,
    nursery: trio.Nursery,
    rig: Rig,
    stub: StubHome,
    agent: bytes,
    autojump_clock: trio.abc.Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await rig.pool.call("h1", agent, Read.LIVE_GET)  # warm: the session is READY
    (s,) = rig.pool._sessions.values()
    outcomes = []
    link = rig.door._uplinks["h1"].ws
    assert isinstance(link, Link)

    async def another_send_under_way() -> None:  # the socket's write lock, held for a while
        async with link.lock:
            await trio.sleep(0.5)

    for at in range(1, MAX_POINTS):
        reads = stub.box.stats.reads
        if lock == "held":
            nursery.start_soon(another_send_under_way)
            await trio.testing.wait_all_tasks_blocked()
        if not await _call_cancelled_at(rig, agent, at, monkeypatch):
            break  # past the call's last point: it was served
        if s.state is State.BUSY:  # the box has it: no holder, its slot kept, until the answer
            assert s.holder is None and s.at_box, at
            assert rig.pool.statistics().calls_in_flight == 1, at
            expected, outcome = reads + 1, "at the box"
        else:  # not sent, or already answered: free at once for the next call
            assert s.state is State.READY and s.holder is None, at
            assert rig.pool.statistics().calls_in_flight == 0, at
            expected = stub.box.stats.reads  # what the box did by now is all it will do
            outcome = "answered" if expected > reads else "not sent"
        outcomes.append(outcome)
        await trio.sleep(2)  # the box answers within a second; a late answer is dropped
        assert stub.box.stats.reads == expected, (at, outcome, "the pool and the box disagree")
        stats = rig.pool.statistics()
        assert (stats.calls_in_flight, stats.queued, stats.busy) == (0, 0, 0), at
        t0 = trio.current_time()
        reply = await rig.pool.call("h1", agent, Read.LOADPOINTS_GET)
        assert reply.t == "loadpoints" and trio.current_time() - t0 < 2, at
        assert rig.pool.statistics().drops == {}, at  # the same session throughout
        assert list(rig.pool._sessions.values()) == [s], at
        await trio.sleep(2)  # the box serves an agent 60 reads a minute
    else:
        pytest.fail(f"a warm call passed more than {MAX_POINTS} cancellation points")
    print("outcome at each point:", outcomes)
    assert "not sent" in outcomes and "at the box" in outcomes, outcomes
    first_sent = outcomes.index("at the box")  # once the request left, it has left at every
    assert set(outcomes[:first_sent]) == {"not sent"}, outcomes  # later point: one cut, no
    assert set(outcomes[first_sent:]) <= {"at the box", "answered"}, outcomes  # way back


async def test_a_call_cancelled_while_it_waits_for_the_sockets_lock_sent_nothing(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    """The one wait a warm call's send has: parked for the socket's write lock behind another
    send. Cancelled there, the request never leaves and the session is free at once."""
    await rig.pool.call("h1", agent, Read.LIVE_GET)  # warm
    (s,) = rig.pool._sessions.values()
    link = rig.door._uplinks["h1"].ws
    assert isinstance(link, Link)
    reads = stub.box.stats.reads
    async with trio.open_nursery() as nursery:
        await link.lock.acquire()
        scope = trio.CancelScope()

        async def call() -> None:
            with scope:
                await rig.pool.call("h1", agent, Read.LIVE_GET)

        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        assert link.lock.statistics().tasks_waiting == 1  # parked for the lock
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        link.lock.release()
    assert scope.cancelled_caught
    assert s.state is State.READY and s.holder is None
    assert rig.pool.statistics().calls_in_flight == 0
    await trio.sleep(2)
    assert stub.box.stats.reads == reads  # the box never saw it
    reply = await rig.pool.call("h1", agent, Read.LOADPOINTS_GET)
    assert reply.t == "loadpoints" and rig.pool.statistics().drops == {}


@pytest.mark.stub(answer_delay_ms=500)
async def test_a_call_cancelled_at_each_point_behind_another_leaves_the_session_free(
    rig: Rig,
    stub: StubHome,
    agent: bytes,
    autojump_clock: trio.abc.Clock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second call of the agent waits for the session while the first is at the box; the
    release hands the session straight to it. Cancelled at each of its points, including the
    turn in which it wakes as the session's new holder, it leaves the session READY."""
    await rig.pool.call("h1", agent, Read.LIVE_GET)  # warm
    (s,) = rig.pool._sessions.values()
    outcomes = []
    for at in range(1, MAX_POINTS):
        reads = stub.box.stats.reads
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rig.pool.call, "h1", agent, Read.LIVE_GET)
            await trio.testing.wait_all_tasks_blocked()
            assert s.state is State.BUSY and s.at_box
            cancelled = await _call_cancelled_at(rig, agent, at, monkeypatch)
        if not cancelled:
            break
        outcomes.append(s.state)
        if s.state is State.BUSY:
            assert s.holder is None and s.at_box, at
            expected = reads + 2
        else:
            assert s.state is State.READY and s.holder is None, at
            assert s.waiting == 0 and rig.pool.statistics().calls_in_flight == 0, at
            expected = stub.box.stats.reads
        await trio.sleep(2)
        assert stub.box.stats.reads == expected, at
        stats = rig.pool.statistics()
        assert (stats.calls_in_flight, stats.queued, stats.busy) == (0, 0, 0), at
        reply = await rig.pool.call("h1", agent, Read.LOADPOINTS_GET)
        assert reply.t == "loadpoints" and rig.pool.statistics().drops == {}, at
        await trio.sleep(3)  # the box serves an agent 60 reads a minute
    else:
        pytest.fail(f"a call passed more than {MAX_POINTS} cancellation points")
    print("state after the cancel at each point:", outcomes)
    assert State.READY in outcomes and State.BUSY in outcomes, outcomes
