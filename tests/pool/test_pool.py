"""The pool with the real door, keys part and stub box over memory links, on MockClock.

Every wait is bounded (`fail_after`); time moves only by the autojump clock. The fixtures
(tests/pool/conftest.py): `rig` started, `stub` home "h1" online, `agent` granted there.
"""

from __future__ import annotations

import pytest
import trio

from ftwbridge.config import Config
from ftwbridge.proto.door import CLOSE_SUPERSEDED
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from stubbox.uplink import StubHome
from tests.harness import Rig, wall_ms


async def refused(
    rig: Rig, home: str, key: bytes, read: Read = Read.LIVE_GET, body: object = None
) -> Refusal:
    with pytest.raises(Refusal) as info, trio.fail_after(30):
        await rig.pool.call(home, key, read, body)
    return info.value


async def test_call_then_idle_close_heard_by_box(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(5):
        reply = await rig.pool.call("h1", agent, Read.LIVE_GET)
    at_ms = reply.body["nowMs"]  # the box's moment: its meter moves every second
    assert reply.t == "live" and abs(at_ms - wall_ms()) < 5_000
    assert reply.body["fields"]["grid_w"] == stub.box.home.live(at_ms, 0)["fields"]["grid_w"]
    assert rig.pool.statistics().sessions == 1 and stub.box.session_count == 1
    await trio.sleep(59)
    assert rig.pool.statistics().sessions == 1
    await trio.sleep(2)
    assert rig.pool.statistics().sessions == 0
    assert rig.pool.statistics().drops == {"idle": 1}
    assert stub.box.session_count == 0  # the box heard tun.end {idle}


async def test_expiry_by_bridge_clock_and_at_box(
    nursery: trio.Nursery, rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key, grant = await rig.grant(stub, ttl_ms=10_000)
    await trio.sleep((grant.expires_at_ms - wall_ms() - 1) / 1000)
    with trio.fail_after(5):
        await rig.pool.call("h1", key, Read.LIVE_GET)  # just before expiresAtMs
    await trio.sleep(0.002)
    err = await refused(rig, "h1", key)
    assert err.code == Code.E_GRANT_EXPIRED
    assert stub.box.stats.reads == 1  # refused at the bridge: the box saw no second read

    # A bridge whose clock runs 2 s slow admits the call; the box refuses and ends the session.
    rig2 = Rig(nursery, bridge_skew_ms=-2_000)
    await rig2.start()
    stub2 = await rig2.add_home("h2")
    key2, grant2 = await rig2.grant(stub2, ttl_ms=10_000)
    with trio.fail_after(5):
        await rig2.pool.call("h2", key2, Read.LIVE_GET)
    await trio.sleep((grant2.expires_at_ms - wall_ms() + 500) / 1000)
    err = await refused(rig2, "h2", key2)
    assert err.code == Code.E_GRANT_EXPIRED
    assert stub2.box.stats.refusals == {Code.E_GRANT_EXPIRED: 1}
    await trio.sleep(0.1)
    assert rig2.pool.statistics().sessions == 0
    assert rig2.pool.statistics().drops.get("expired") == 1


async def test_roster_drop_closes_session_and_forgets_key(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)
    await stub.drop_agent(agent)
    with trio.fail_after(5):
        await rig.door.wait_roster("h1", lambda r: agent not in r.agents())
    await trio.sleep(0.1)
    assert rig.pool.statistics().sessions == 0
    assert rig.pool.statistics().drops.get("revoked") == 1
    assert stub.box.session_count == 0
    assert not await rig.keys.has(agent)
    assert (await refused(rig, "h1", agent)).code == Code.E_GRANT_REVOKED


async def test_box_vanishing_mid_call_ends_in_words(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)
    stub.hold = True
    result: list[Refusal] = []

    async def caller() -> None:
        result.append(await refused(rig, "h1", agent))

    async with trio.open_nursery() as inner:
        inner.start_soon(caller)
        await trio.sleep(1)
        assert rig.pool.statistics().calls_in_flight == 1
        await rig.links[0].close(1006)
    assert result[0].code == Code.E_UNAVAILABLE and result[0].details == {"reason": "uplink_lost"}
    stats = rig.pool.statistics()
    assert (stats.sessions, stats.calls_in_flight, stats.queued) == (0, 0, 0)


async def test_unanswered_handshake_leaves_nothing(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    stub.hold = True
    start = trio.current_time()
    err = await refused(rig, "h1", agent)
    assert err.details == {"reason": "no_answer"}
    assert trio.current_time() - start == pytest.approx(5, abs=0.1)
    assert rig.keys.pending_handshakes == 0
    assert rig.pool.statistics().sessions == 0


async def test_takeover_by_newer_uplink(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)
    old = rig.links[0]
    await rig.connect(stub)
    with trio.fail_after(5):
        await old.closed.wait()
    assert old.close_code == CLOSE_SUPERSEDED
    await trio.sleep(0.1)
    assert rig.pool.statistics().drops.get("superseded") == 1
    assert rig.door.stats.takeovers == 1
    with trio.fail_after(5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)  # a new session on the new uplink


@pytest.mark.config(door_msgs_burst=4, door_msgs_per_s=0.01)
async def test_door_drops_tun_past_limit_and_counts(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)  # m1, hello, read: 3 tun to the box
    refusals = []
    for _ in range(3):
        try:
            with trio.fail_after(1):
                await rig.pool.call("h1", agent, Read.LIVE_GET)
        except Refusal as exc:  # the door says at once that it dropped the request
            refusals.append(exc.code)
    assert refusals and set(refusals) == {Code.E_RATE_LIMITED}
    assert rig.door.stats.dropped_to_box >= 1
    assert rig.door.online("h1")  # the uplink stays up


@pytest.mark.config(queue_per_home=4)
async def test_queue_per_home_refuses_the_fifth(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    with trio.fail_after(5):
        await rig.pool.call("h1", agent, Read.LIVE_GET)
    stub.hold = True
    async with trio.open_nursery() as inner:
        inner.start_soon(lambda: rig.pool.call("h1", agent, Read.LIVE_GET))
        await trio.sleep(0.5)  # the first call is now at the box
        for _ in range(4):
            inner.start_soon(lambda: rig.pool.call("h1", agent, Read.LIVE_GET))
        await trio.sleep(0.5)
        stats = rig.pool.statistics()
        assert stats.calls_in_flight == 1 and stats.queued == 4
        err = await refused(rig, "h1", agent)
        assert err.code == Code.E_RATE_LIMITED
        inner.cancel_scope.cancel()
    stats = rig.pool.statistics()
    assert stats.queued == 0  # cancelled callers freed their places in the queue
    assert stats.calls_in_flight == 1  # but the box still holds the first one's read
    await trio.sleep(Config().call_deadline_s)  # unanswered that long: the session is replaced
    stats = rig.pool.statistics()
    assert (stats.calls_in_flight, stats.sessions) == (0, 0)
    assert stats.drops.get("no_answer") == 1


@pytest.mark.parametrize(
    ("stub", "code", "args"),
    [
        ({"noise": False}, Code.E_UNAVAILABLE, {"subsystem": "assistants"}),
        ({"clock_source": "none"}, Code.E_UNAVAILABLE, {"subsystem": "clock"}),
    ],
    indirect=["stub"],
)
async def test_box_that_takes_no_assistants_says_so_at_once(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock, code: Code, args: dict[str, str]
) -> None:
    start = trio.current_time()
    err = await refused(rig, "h1", agent)
    assert (err.code, err.details) == (code, args)
    assert trio.current_time() - start < 1


async def test_clock_skew_refused(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    stub.clock_offset_ms = 6 * 60_000
    err = await refused(rig, "h1", agent)
    assert err.code == Code.E_CLOCK_SKEW and err.details["maxMs"] == 300_000


async def test_agent_key_aimed_at_another_home_is_refused_before_a_byte_leaves(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    other = await rig.add_home("h2")
    err = await refused(rig, "h2", agent)
    assert err.code == Code.E_GRANT_REVOKED
    assert other.box.stats.handshakes_refused == 0 and other.box.stats.reads == 0


@pytest.mark.config(sessions_per_home=2)
async def test_sessions_per_home_cap(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    keys = [(await rig.grant(stub))[0] for _ in range(3)]
    with trio.fail_after(5):
        for k in keys[:2]:
            await rig.pool.call("h1", k, Read.LIVE_GET)
    err = await refused(rig, "h1", keys[2])
    assert err.code == Code.E_CAP_EXCEEDED and err.details["cap"] == "sessions"
