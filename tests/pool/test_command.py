"""Commands through the real pool and the stub box's brain on MockClock (docs/control.md):
the `controlRev` pre-read, one retry under a new `cmdId` on `E_CONFLICT`, `cmds_per_hour` at
the bridge before a byte leaves, and a command waiting behind reads that no read drops."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ftwbridge.door import Rosters
from ftwbridge.pool.command import HOUR_S, CommandBudget
from ftwbridge.proto.control import CmdState, Hold, Release
from ftwbridge.proto.names import Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant
from stubbox.uplink import StubHome
from tests.harness import ALL_READS, Rig, wall_ms

HOLD = Hold("lp1", 7400, 600).to_args()


async def control_agent(rig: Rig, stub: StubHome, **caps: int) -> bytes:
    """An agent granted the reads and `loadpoint.hold` at `stub` for three hours."""
    key = await rig.keys.create(stub.home)
    grant = AgentGrant(
        "c-" + key[:3].hex(),
        "test",
        "Control assistant",
        (*ALL_READS, "ftw.dispatch.write", "ftw.goals.write"),
        ("loadpoint.hold",),
        dict(caps),
        wall_ms(),
        wall_ms() + 3 * 3_600_000,
    )
    await stub.put_agent(key, grant)
    with trio.fail_after(5):
        await rig.door.wait_roster(stub.home, lambda r: key in r.agents())
    return key


async def test_first_command_reads_control_rev_then_acts(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub)
    reads = stub.box.stats.reads
    cmd_id = rig.pool.new_cmd_id()
    out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, cmd_id)
    assert out.cmd_id == cmd_id and out.ack is not None
    assert out.result.state in (CmdState.APPLIED, CmdState.UNCONFIRMED)
    assert out.result.observed is not None and "power_w" in out.result.observed
    assert stub.box.stats.reads == reads + 1  # the loadpoints.get before the first command
    again = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, cmd_id)
    assert again.result == out.result and stub.box.stats.reads == reads + 1  # acted once
    lp = (await rig.pool.call("h1", key, Read.LOADPOINTS_GET)).body["loadpoints"][0]
    assert lp["hold"] is not None and lp["hold"]["untilMs"] == out.ack.expires_at_ms
    stop = await rig.pool.command(
        "h1", key, "loadpoint.hold", Release("lp1").to_args(), rig.pool.new_cmd_id()
    )
    assert stop.result.state in (CmdState.APPLIED, CmdState.UNCONFIRMED)
    with pytest.raises(Refusal) as nothing:  # nothing left to release
        await rig.pool.command(
            "h1", key, "loadpoint.hold", Release("lp1").to_args(), rig.pool.new_cmd_id()
        )
    assert nothing.value.code == Code.E_NOT_FOUND


async def test_a_conflict_is_read_again_and_tried_once_more_under_a_new_id(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub)
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    stub.box.home.controls.bump()  # the owner changed something at home since
    first = rig.pool.new_cmd_id()
    out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, first)
    assert out.cmd_id != first and out.result.state in (CmdState.APPLIED, CmdState.UNCONFIRMED)


async def test_cmds_per_hour_is_checked_before_a_byte_leaves(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub, cmds_per_hour=2)
    for _ in range(2):
        await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    sent = len(rig.links[0].sent)
    t0 = trio.current_time()
    with pytest.raises(Refusal) as limited:
        await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    assert limited.value.code == Code.E_RATE_LIMITED
    assert 0 < limited.value.retry_after_ms <= HOUR_S * 1000  # type: ignore[operator]
    assert len(rig.links[0].sent) == sent and trio.current_time() == t0
    stop = Release("lp1").to_args()  # never limited: an assistant can always stop
    await rig.pool.command("h1", key, "loadpoint.hold", stop, rig.pool.new_cmd_id())
    await trio.sleep(limited.value.retry_after_ms / 1000)  # type: ignore[operator]
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())


def test_budget_counts_a_cmd_id_once_over_a_rolling_hour() -> None:
    budget, key = CommandBudget(), ("h", b"k")
    budget.charge(key, "a", 0.0)
    budget.charge(key, "a", 10.0)  # sent again: the box answers it from its table
    assert budget.retry_after_ms(key, 2, 20.0) is None
    budget.charge(key, "b", 30.0)
    assert budget.retry_after_ms(key, 2, 40.0) == (HOUR_S - 40) * 1000
    assert budget.retry_after_ms(key, 2, HOUR_S) is None


@pytest.mark.config(pace_calls_burst=1, pace_calls_per_s=0.5, queue_per_home=1)
async def test_a_command_waiting_behind_reads_is_never_dropped_for_a_read(
    rig: Rig, stub: StubHome, autojump_clock: trio.abc.Clock
) -> None:
    key = await control_agent(rig, stub)
    readers = [await control_agent(rig, stub) for _ in range(3)]
    outcomes: list[str] = []

    async def read(k: bytes) -> None:
        try:
            await rig.pool.call("h1", k, Read.LIVE_GET)
            outcomes.append("read")
        except Refusal as exc:
            outcomes.append(exc.code)

    async def command() -> None:
        out = await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
        outcomes.append(out.result.state.value)

    with trio.fail_after(60):
        async with trio.open_nursery() as n:
            n.start_soon(read, readers[0])  # takes the burst
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(read, readers[1])  # waits 2 s for its turn: the reads' one place
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(command)  # its own place; waits 4 s, past pace_wait_s (3 s)
            await trio.testing.wait_all_tasks_blocked()
            n.start_soon(read, readers[2])  # the reads' place is taken: refused at once
    assert outcomes.count("read") == 2 and outcomes.count(Code.E_RATE_LIMITED) == 1
    assert any(o in ("applied", "unconfirmed") for o in outcomes)


class _LaggingRosters(Rosters):
    """A door's rosters that, once `lag` is set, answer the box's new rosters without taking
    them: the bridge still lists an agent its home has dropped."""

    lag = False

    async def take_roster(self, home: str, signed: bytes) -> tuple[bool, int, str]:
        if self.lag:
            held = await self.roster(home)
            return True, held.seq if held else 0, ""
        return await super().take_roster(home, signed)


async def test_a_revoked_agent_is_refused_at_the_box_while_the_bridge_lags(
    nursery: trio.Nursery, autojump_clock: trio.abc.Clock
) -> None:
    """The box is the authority on its roster: an agent the home dropped is refused there even
    while the bridge still lists it (the bridge's own refusal, with a roster in time, is in
    tests/e2e/test_control.py). Its session ends `revoked`, a new one is never answered, and
    the hold it set is gone."""
    rig = Rig(nursery)
    r = rig.door.rosters
    rosters = rig.door.rosters = _LaggingRosters(
        r.store, stats=r.stats, events=r.events, refusal_log=r.refusal_log
    )
    await rig.start()
    stub = await rig.add_home()
    stub.box.frozen_ms = wall_ms() - wall_ms() % 86_400_000 + 19 * 3_600_000  # the car is in
    key = await control_agent(rig, stub)
    await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    held = stub.box.home.controls.hold("lp1", stub.box.frozen_ms)
    assert held is not None and held.by == key.hex()
    rosters.lag = True
    await stub.drop_agent(key)
    assert (await rig.door.roster("h1")).agents().get(key) is not None  # type: ignore[union-attr]
    with pytest.raises(Refusal) as refused:
        await rig.pool.command("h1", key, "loadpoint.hold", HOLD, rig.pool.new_cmd_id())
    # the box ended the session (revoked) and never answers a handshake for a key it dropped
    assert refused.value == Refusal(Code.E_UNAVAILABLE, {"reason": "no_answer"})
    assert rig.pool.statistics().drops.get("revoked") == 1
    assert stub.box.home.controls.hold("lp1", stub.box.frozen_ms) is None  # nothing charging


def test_budget_forgets_an_agent_whose_hour_has_passed() -> None:
    """Agents that stop commanding leave nothing behind: the table holds only agents with a
    command in the rolling hour (it was kept for every agent that ever commanded)."""
    budget = CommandBudget()
    for n in range(100):
        budget.charge(("h", bytes([n])), f"c{n}", float(n))
    budget.charge(("h", b"late"), "x", HOUR_S + 100)
    assert len(budget) == 1
