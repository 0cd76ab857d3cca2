"""How sessions end, as the box hears it: only `tun.end` reasons of the contract, and a bounded
`Tun.aclose` even when the send under it blocks. MockClock (autojump) throughout."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from ftwbridge.door import Tun
from ftwbridge.door.dispatch import dispatch
from ftwbridge.door.tunnel import ACLOSE_S, TUN_QUEUE, TunEnded, Uplink
from ftwbridge.proto.door import tun as tun_message
from ftwbridge.proto.envelope import decode_envelope
from ftwbridge.proto.names import Read, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import Msg
from stubbox.uplink import StubHome
from tests.harness import Rig


def _tun_ends(rig: Rig) -> list[str]:
    out = []
    for link in rig.links:
        for data in link.sent:
            env = decode_envelope(data)
            if env.t == Msg.TUN_END:
                out.append(env.b["reason"])
    return out


async def _call(rig: Rig, key: bytes) -> Any:
    with trio.fail_after(30):
        try:
            return await rig.pool.call("h1", key, Read.LIVE_GET)
        except Refusal as exc:
            return exc


@pytest.mark.config(idle_close_s=10)
async def test_local_causes_reach_the_box_as_closed(
    rig: Rig, stub: StubHome, agent: bytes, autojump_clock: trio.abc.Clock
) -> None:
    stub.hold = True  # the handshake times out: a local cause ("no_answer")
    assert isinstance(await _call(rig, agent), Refusal)
    stub.hold = False
    stub.clock_offset_ms = 6 * 60_000  # hello_ok with a clock too far off: refused
    assert isinstance(await _call(rig, agent), Refusal)
    stub.clock_offset_ms = 0
    assert not isinstance(await _call(rig, agent), Refusal)
    uplink = next(iter(rig.door._uplinks.values()))
    (tun,) = uplink.tuns.values()
    garbage = tun_message(tun.sid, b"\x00" * 40)  # bytes that fail the session's authentication
    await dispatch(rig.door, uplink, decode_envelope(garbage), garbage)
    with trio.fail_after(5):
        await rig.pool._wait_until(lambda: not rig.pool.statistics().sessions)
    assert rig.pool.statistics().drops.get("protocol_error") == 1
    assert not isinstance(await _call(rig, agent), Refusal)
    await trio.sleep(11)  # idle close
    ends = _tun_ends(rig)
    contract = {r.value for r in TunEndReason}
    assert ends and set(ends) <= contract, ends
    assert ends == ["closed", "closed", "closed", "idle"], ends


class _Stuck:
    """A WebSocket whose sends never complete (a box that reads nothing)."""

    def __init__(self) -> None:
        self.sends = 0

    async def receive(self) -> bytes:
        await trio.sleep_forever()
        raise AssertionError

    async def send(self, data: bytes) -> None:
        self.sends += 1
        await trio.sleep_forever()

    async def close(self, code: int, reason: str = "") -> None:
        return None


@pytest.mark.parametrize("cancelled", [False, True])
async def test_tun_aclose_is_bounded_when_the_send_blocks(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock, cancelled: bool
) -> None:
    rig = Rig(nursery)
    ws = _Stuck()
    uplink = Uplink("h1", ws, limits=rig.door.limits("h1", outbound=True), on_dropped=print)
    tun = Tun(uplink, uplink.new_sid())
    uplink.tuns[tun.sid] = tun
    start = trio.current_time()
    with trio.fail_after(10), trio.CancelScope() as scope:
        if cancelled:
            scope.cancel()  # the caller is being cancelled: the shield still lets it try, bounded
        await tun.aclose(TunEndReason.REVOKED)
    assert trio.current_time() - start == pytest.approx(ACLOSE_S)
    assert ws.sends == 1 and tun.sid not in uplink.tuns and tun.end_reason == "revoked"


def test_tun_end_takes_only_contract_reasons() -> None:
    from ftwbridge.proto.door import tun_end
    from ftwbridge.proto.errors import LocalProtocolError

    assert decode_envelope(tun_end(3, TunEndReason.IDLE)).b == {"sid": 3, "reason": "idle"}
    for bad in ("refused", "protocol_error", "uplink_lost"):
        with pytest.raises(LocalProtocolError):
            tun_end(3, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("offset_s", [-0.001, 0.0, 0.001])
@pytest.mark.stub(answer_delay_ms=1000)
async def test_cancelled_while_the_reader_hands_over_the_answer(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock, offset_s: float
) -> None:
    """The uplink's reader answers the waiting call in its own task; a call cancelled around
    that moment leaves nothing behind, and the session's next call gets its own answer."""
    first = await _call(rig, agent)  # opens the session (one read: 1 s at the box)
    assert not isinstance(first, Refusal)
    with trio.move_on_after(1.0 + offset_s):
        await rig.pool.call("h1", agent, Read.LIVE_GET)
    stats = rig.pool.statistics()
    assert stats.queued == 0 and stats.calls_in_flight <= 1  # 1: the box still works on it
    await trio.sleep(2)  # the abandoned answer, if still coming, arrives and is dropped
    assert rig.pool.statistics().calls_in_flight == 0
    with trio.fail_after(10):
        reply = await rig.pool.call("h1", agent, Read.LOADPOINTS_GET)
    assert reply.t == "loadpoints"
    assert rig.pool.statistics().sessions == 1


@pytest.mark.parametrize("repeat", range(12))
@pytest.mark.config(idle_close_s=10, pace_calls_burst=1, pace_calls_per_s=0.1, pace_wait_s=20)
async def test_a_call_racing_the_idle_close_gets_a_new_session(
    rig: Rig, agent: bytes, autojump_clock: trio.abc.Clock, repeat: int
) -> None:
    """No call is refused for a close it did not ask for. Pacing makes the second
    call wait until the very moment the idle close fires (trio wakes both in either order)."""
    assert not isinstance(await _call(rig, agent), Refusal)  # takes no mock time
    answer = await _call(rig, agent)  # its pacing turn comes at the idle deadline
    assert not isinstance(answer, Refusal), answer.details


async def test_close_all_closes_every_uplink_with_its_code(
    rig: Rig, autojump_clock: trio.abc.Clock
) -> None:
    """Drain's last word to the boxes: a Close frame they can act on, not 1006."""
    for name in ("h1", "h2"):
        await rig.add_home(name)
    with trio.fail_after(5):
        await rig.door.close_all(1001, "the bridge is restarting")
    assert [link.close_code for link in rig.links] == [1001, 1001]


async def test_a_tunnels_queue_before_attach(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    """Before `attach`, the box's messages wait in order, `TUN_QUEUE` at most (one more is
    refused, for the door to count); a waiting `receive` wakes for the next one; what came
    before the end is still given, then `TunEnded`; after `attach`, `receive` ends at once."""
    rig = Rig(nursery)
    uplink = Uplink("h1", _Stuck(), limits=rig.door.limits("h1", outbound=True), on_dropped=print)
    tun = Tun(uplink, uplink.new_sid())
    got: list[bytes] = []

    async def take() -> None:
        got.append(await tun.receive())

    nursery.start_soon(take)
    await trio.testing.wait_all_tasks_blocked()
    assert tun._deliver(b"m0") and not got
    await trio.testing.wait_all_tasks_blocked()
    assert got == [b"m0"]
    assert all(tun._deliver(b"m%d" % i) for i in range(1, TUN_QUEUE + 1))
    assert not tun._deliver(b"one too many")
    assert await tun.receive() == b"m1"
    assert tun.queued() == [b"m%d" % i for i in range(2, TUN_QUEUE + 1)] and not tun.queued()
    assert tun._deliver(b"last")
    tun._end("closed")
    assert tun._deliver(b"after the end")  # goes nowhere, and is not a drop
    assert await tun.receive() == b"last"
    with pytest.raises(TunEnded):
        await tun.receive()
    other = Tun(uplink, uplink.new_sid())
    other.attach(print)  # type: ignore[arg-type]
    with pytest.raises(TunEnded):
        await other.receive()
