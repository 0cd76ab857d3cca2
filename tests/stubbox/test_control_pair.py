"""Part E in pairs: our bridge-side session against the stub box's brain, in memory.

Commands (idempotent replay, expiry, stale revision, each refusal in the order of part E), the
charger following a hold, goal requests and the owner's decisions with `agent.decided` pushed
while a read is in flight. Raw messages are sent as a careless or hostile agent would.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ftwbridge.proto.control import (
    CmdResult,
    CmdState,
    Decided,
    Decision,
    GoalQueued,
    Hold,
    Release,
    RequestList,
    RequestState,
    new_cmd_id,
)
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.names import Code, GoalMsg, Op, Read, Scope
from ftwbridge.proto.noise import generate_static
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.session import Acked, Failed, Push, Reply
from stubbox.charger import OWNER
from tests.stubbox.test_box_pair import NOW, READ_SCOPES, Pair

DAY = 86_400_000
EVENING = NOW - NOW % DAY + 20 * 3_600_000
"""20:00 UTC: car1 is plugged in and the planner does not hold the charger."""
CONTROL = (*READ_SCOPES, Scope.FTW_DISPATCH_WRITE.value, Scope.FTW_GOALS_WRITE.value)
HOLD = Hold("lp1", 7400, 600)


class Ctl(Pair):
    """A pair whose agent may hold the charger and ask for goals; it has read hello_ok and
    `loadpoints` (so its session knows the box's uptime and `controlRev`)."""

    def __init__(
        self, *, ops: tuple[str, ...] = (Op.LOADPOINT_HOLD.value,), start: int = EVENING, **kw: Any
    ) -> None:
        kw.setdefault("scopes", CONTROL)
        super().__init__(ops=ops, ttl_ms=40 * DAY, **kw)
        self.now = start
        self.uptime = 1000
        self.serial = 0
        self.hello()
        self.ask(Read.LOADPOINTS_GET)

    def exchange(self, message: bytes, sid: int = 1) -> list[Any]:
        events: list[Any] = []
        for out in self.box.receive(sid, message, self.now, self.uptime):
            events += self.session.receive(out, now_ms=self.now)
        return events

    def new_id(self) -> str:
        self.serial += 1
        return new_cmd_id(self.now, self.serial.to_bytes(10, "big"))

    def command(
        self, args: dict[str, Any], *, cmd_id: str | None = None, op: str = "loadpoint.hold"
    ) -> list[Any]:
        _rid, message = self.session.command(
            op, args, cmd_id=cmd_id or self.new_id(), now_ms=self.now
        )
        return self.exchange(message)

    def raw(self, t: str, body: Any, rid: int = 77) -> list[Envelope]:
        """Send one envelope as a hand-made agent would; returns the box's envelopes."""
        chan = self.session._channel
        out = self.box.receive(1, chan.wrap(Envelope(t, rid, body)), self.now, self.uptime)
        return [env for m in out if (env := chan.unwrap(m)) is not None]

    def lp1(self) -> dict[str, Any]:
        ev = self.ask(Read.LOADPOINTS_GET)
        assert isinstance(ev, Reply)
        return dict(ev.body["loadpoints"][0])


def refused(events: list[Any]) -> tuple[str, dict[str, Any]]:
    [ev] = events
    assert isinstance(ev, Failed), ev
    return ev.refusal.code, ev.refusal.details


def test_a_hold_moves_the_charger_and_ends_at_its_time() -> None:
    p = Ctl()
    assert p.lp1()["state"] == "connected" and p.lp1()["power_w"] == 0
    ack, result = p.command(HOLD.to_args())
    assert isinstance(ack, Acked) and ack.ack.expires_at_ms == EVENING + 600_000
    assert isinstance(result, Reply) and isinstance(result.body, CmdResult)
    # the read-back is what the charger draws (whole amps), not the 7,400 W asked
    assert result.body.state is CmdState.APPLIED
    assert result.body.observed == {"power_w": 6900, "untilMs": EVENING + 600_000}
    lp = p.lp1()
    assert lp["state"] == "charging" and lp["power_w"] == 6900
    assert lp["hold"] == {"power_w": 7400, "untilMs": EVENING + 600_000}
    live = p.ask(Read.LIVE_GET).body
    assert live["fields"]["ev_w"] == 6900
    f = live["fields"]
    assert f["grid_w"] == f["load_w"] + f["ev_w"] + f["battery_w"] - f["pv_w"]
    p.now += 600_000  # the hold ends at its time
    lp = p.lp1()
    assert lp["hold"] is None and lp["power_w"] == 0 and lp["state"] == "connected"


def test_a_hold_with_no_car_is_unconfirmed_and_release_ends_it() -> None:
    p = Ctl(start=EVENING - 8 * 3_600_000)  # 12:00, car1 away
    _ack, result = p.command(HOLD.to_args())
    assert result.body.state is CmdState.UNCONFIRMED and result.body.observed["power_w"] == 0
    ack, result = p.command(Release("lp1").to_args())
    assert isinstance(ack, Acked) and result.body.state is CmdState.APPLIED
    assert p.lp1()["hold"] is None


def test_replay_of_a_cmd_id_gets_the_same_answer_and_acts_once() -> None:
    p = Ctl()
    cmd_id = p.new_id()
    first = p.command(HOLD.to_args(), cmd_id=cmd_id)
    again = p.command(HOLD.to_args(), cmd_id=cmd_id)  # a retry: new request id, same cmdId
    assert [type(e) for e in again] == [Acked, Reply]
    assert again[0].ack == first[0].ack and again[1].body == first[1].body
    assert p.box.commands.stats.acted == 1 and p.box.commands.stats.replays == 1
    # the table is looked up first: even a body cut down to its cmdId gets the stored answers
    assert [e.t for e in p.raw("cmd", {"cmdId": cmd_id})] == [Msg.CMD_ACK, Msg.CMD_RESULT]
    assert p.box.commands.stats.acted == 1


def test_an_expired_command_is_refused_and_stays_refused() -> None:
    p = Ctl()
    cmd_id = p.new_id()
    _rid, message = p.session.command("loadpoint.hold", HOLD.to_args(), cmd_id=cmd_id, now_ms=p.now)
    p.uptime += 60_000  # the command reaches the box a minute late
    assert refused(p.exchange(message))[0] == Code.E_CMD_EXPIRED
    assert p.lp1()["hold"] is None
    assert refused(p.command(HOLD.to_args(), cmd_id=cmd_id))[0] == Code.E_CMD_EXPIRED


def test_a_stale_revision_conflicts_and_the_same_cmd_id_may_try_again() -> None:
    p = Ctl()
    rev = p.session.control_rev
    assert rev is not None
    p.box.home.controls.set_target("car2", 500)  # the owner changes something meanwhile
    cmd_id = p.new_id()
    assert refused(p.command(HOLD.to_args(), cmd_id=cmd_id)) == (Code.E_CONFLICT, {"rev": rev + 1})
    p.ask(Read.LOADPOINTS_GET)  # read again, as the bridge does, and try once more
    assert [type(e) for e in p.command(HOLD.to_args(), cmd_id=cmd_id)] == [Acked, Reply]
    # cmd.result carries the new controlRev: the next command needs no read first
    assert p.session.control_rev == p.box.home.controls.rev
    assert [type(e) for e in p.command(Release("lp1").to_args())] == [Acked, Reply]


def test_agent_decided_during_a_read_answers_no_call() -> None:
    p = Ctl()
    goal = {
        "goal": "ev_target",
        "args": {"car": "car1", "soc_permille": 900, "byMs": EVENING + DAY},
    }
    [queued] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, goal)[1])
    assert isinstance(queued.body, GoalQueued) and queued.body.expires_at_ms == EVENING + DAY
    rid, read = p.session.request(Read.CARS_GET.value)
    [(_sid, push)] = p.box.decide(queued.body.req_id, True, p.now)
    events = p.session.receive(push)
    assert events == [Push("agent.decided", Decided(queued.body.req_id, Decision.APPROVED, p.now))]
    assert p.session.busy  # the read is still in flight
    [answer] = p.exchange(read)
    assert answer.id == rid and answer.body["cars"][0]["target_soc_permille"] == 900
    [listed] = p.exchange(p.session.request(Read.REQUESTS_GET.value)[1])
    assert isinstance(listed.body, RequestList)
    [record] = listed.body.requests
    assert record.state is RequestState.APPROVED and record.decided_at_ms == p.now


def test_site_mode_goal_sets_the_mode_when_approved_and_denial_changes_nothing() -> None:
    p = Ctl()
    ask = {"goal": "site_mode", "args": {"mode": "self_consumption"}, "note": "sunny week"}
    [q1] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, ask)[1])
    [q2] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, ask)[1])
    p.box.decide(q1.body.req_id, False, p.now)
    assert p.ask(Read.LIVE_GET).body["mode"] == "planner_arbitrage"
    p.box.decide(q2.body.req_id, True, p.now)
    assert p.ask(Read.LIVE_GET).body["mode"] == "self_consumption"
    with pytest.raises(ValueError, match="approved already"):
        p.box.decide(q2.body.req_id, False, p.now)
    with pytest.raises(KeyError):
        p.box.decide("goal-999", True, p.now)


def test_goal_requests_expire_after_a_day_and_are_kept_thirty() -> None:
    p = Ctl(caps={"pending_requests": 1})
    ask = {"goal": "site_mode", "args": {"mode": "idle"}}
    [q] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, ask)[1])
    assert refused(p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, ask)[1])) == (
        Code.E_CAP_EXCEEDED,
        {"cap": "pending_requests", "max": 1, "asked": 2},
    )
    p.now += DAY
    [(_sid, push)] = p.box.expire_goals(p.now)
    [ev] = p.session.receive(push)
    assert ev.body == Decided(q.body.req_id, Decision.EXPIRED, EVENING + DAY)
    [again] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, ask)[1])  # room again
    assert isinstance(again.body, GoalQueued)
    p.now = EVENING + 30 * DAY
    [listed] = p.exchange(p.session.request(Read.REQUESTS_GET.value)[1])
    assert [r.req_id for r in listed.body.requests] == [again.body.req_id]


def hold_refusal(p: Ctl, args: dict[str, Any], op: str = "loadpoint.hold") -> tuple[str, Any]:
    return refused(p.command(args, op=op))


def test_refusals_of_part_e() -> None:
    p = Ctl(ops=("loadpoint.hold", "site.mode.set"), caps={"hold_s": 600, "cmds_per_hour": 2})
    assert hold_refusal(p, {"mode": "idle"}, op="site.mode.set") == (
        Code.E_SCOPE_DENIED,
        {"needScope": "ftw.mode.write"},
    )
    assert hold_refusal(p, {"id": "lp1", "power_w": 7400}) == (
        Code.E_NEEDS_OWNER,
        {"op": "loadpoint.hold", "why": "durable"},
    )
    assert hold_refusal(p, {"id": "lp1", "power_w": 7400, "hold_s": 601}) == (
        Code.E_CAP_EXCEEDED,
        {"cap": "hold_s", "max": 600, "asked": 601},
    )
    assert hold_refusal(p, {"id": "lp9", "power_w": 7400, "hold_s": 60}) == (
        Code.E_NOT_FOUND,
        {"what": "loadpoint", "id": "lp9"},
    )
    assert hold_refusal(p, Release("lp1").to_args()) == (
        Code.E_NOT_FOUND,
        {"what": "hold", "id": "lp1"},
    )
    assert hold_refusal(p, {"id": "lp1", "power_w": 1, "hold_s": 60, "boost": True})[0] == (
        Code.E_UNKNOWN_OP
    )
    assert hold_refusal(p, {"id": "lp1", "power_w": 1}, op="battery.hold") == (
        Code.E_UNKNOWN_OP,
        {"op": "battery.hold"},
    )
    p.box.home.controls.blocked_by = ["meter.p1 stale"]
    assert hold_refusal(p, HOLD.to_args()) == (
        Code.E_PRECONDITION,
        {"blockedBy": ["meter.p1 stale"]},
    )
    p.box.home.controls.blocked_by = []
    for _ in range(2):
        assert [type(e) for e in p.command(HOLD.to_args())] == [Acked, Reply]
    code, args = hold_refusal(p, HOLD.to_args())
    assert code == Code.E_RATE_LIMITED and args["retryAfterMs"] == 3_600_000
    assert [type(e) for e in p.command(Release("lp1").to_args())] == [Acked, Reply]  # stop: always


def test_site_mode_set_is_the_owners_even_when_granted() -> None:
    scopes = (*CONTROL, Scope.FTW_MODE_WRITE.value)
    p = Ctl(ops=("site.mode.set",), scopes=scopes)
    assert hold_refusal(p, {"mode": "idle"}, op="site.mode.set") == (
        Code.E_NEEDS_OWNER,
        {"op": "site.mode.set", "why": "durable"},
    )
    assert hold_refusal(p, HOLD.to_args()) == (Code.E_OP_NOT_GRANTED, {"op": "loadpoint.hold"})


def test_another_partys_hold_is_the_owners() -> None:
    p = Ctl(start=EVENING - 18 * 3_600_000)  # 02:00: the planner's night charge holds lp1
    assert p.box.home.controls.hold("lp1", p.now).by == OWNER  # type: ignore[union-attr]
    held = (Code.E_NEEDS_OWNER, {"op": "loadpoint.hold", "why": "held"})
    assert hold_refusal(p, HOLD.to_args()) == held
    assert hold_refusal(p, Release("lp1").to_args()) == (
        Code.E_NOT_FOUND,
        {"what": "hold", "id": "lp1"},
    )
    # a second agent can neither take over nor release the first one's hold
    p.now = EVENING
    p.ask(Read.LOADPOINTS_GET)
    p.command(HOLD.to_args())
    private, key = generate_static()
    p.owner.put_agent(key, replace(p.grant, id="a2"), now_ms=p.now)
    p.box.set_roster(p.owner.roster)
    other = p.open(sid=2, private=private)
    chan = p.box._sessions[2].channel
    assert chan is not None
    for args in (HOLD.to_args(), Release("lp1").to_args()):
        cmd = {
            "cmdId": p.new_id(),
            "op": "loadpoint.hold",
            "args": args,
            "notValidAfterMs": p.uptime + 20_000,
            "expect": {"rev": p.box.home.controls.rev},
        }
        rid, message = other.request("goal.request", None)  # any request: its id and bytes
        other.abandon(sent=False)
        message = other._channel.wrap(Envelope("cmd", rid, cmd), bulk=False)
        [out] = p.box.receive(2, message, p.now, p.uptime)
        env = other._channel.unwrap(out)
        assert env is not None and env.b["code"] in ("E_NEEDS_OWNER", "E_NOT_FOUND"), env
    assert p.lp1()["hold"] == {"power_w": 7400, "untilMs": p.now + 600_000}


def test_reads_only_grant_and_raw_hostile_commands() -> None:
    p = Ctl(ops=(), scopes=READ_SCOPES)
    assert hold_refusal(p, HOLD.to_args()) == (Code.E_OP_NOT_GRANTED, {"op": "loadpoint.hold"})
    _rid, msg = p.session.request(
        GoalMsg.GOAL_REQUEST.value, {"goal": "site_mode", "args": {"mode": "idle"}}
    )
    assert refused(p.exchange(msg)) == (Code.E_SCOPE_DENIED, {"needScope": "ftw.goals.write"})
    good = {
        "cmdId": p.new_id(),
        "op": "loadpoint.hold",
        "args": HOLD.to_args(),
        "notValidAfterMs": 30_000,
        "expect": {"rev": 1},
    }
    for body, arg in [
        (None, "cmdId"),
        ([1, 2], "cmdId"),
        ({"cmdId": "DROP TABLE"}, "cmdId"),
        (good | {"cmdId": p.new_id(), "expect": None}, "expect"),
        (good | {"cmdId": p.new_id(), "notValidAfterMs": -5}, "notValidAfterMs"),
        (good | {"cmdId": p.new_id(), "args": "lp1"}, "args"),
    ]:
        [env] = p.raw("cmd", body)
        assert env.t == "error" and env.id == 77, env
        assert env.b["code"] == "E_UNKNOWN_OP" and env.b["args"] == {"arg": arg}, env.b
    assert p.box.commands.stats.acted == 0


def test_the_checks_come_in_part_e_order() -> None:
    p = Ctl(ops=("loadpoint.hold",))
    late = p.new_id()
    _rid, message = p.session.command("battery.hold", {}, cmd_id=late, now_ms=p.now)
    p.uptime += 60_000  # expiry comes before the unknown op
    assert refused(p.exchange(message))[0] == Code.E_CMD_EXPIRED
    p.uptime -= 60_000
    p.box.home.controls.blocked_by = ["planner"]
    p.box.home.controls.bump()  # a stale revision comes before the dispatch gate
    assert refused(p.command(HOLD.to_args()))[0] == Code.E_CONFLICT
    p.ask(Read.LOADPOINTS_GET)
    assert refused(p.command({"id": "lp1", "power_w": 5}))[0] == Code.E_PRECONDITION  # gate first
    p.box.home.controls.blocked_by = []
    assert refused(p.command({"id": "lp1", "power_w": 5}))[0] == Code.E_NEEDS_OWNER


def test_the_table_forgets_after_a_day_and_an_expired_grant_ends_the_session() -> None:
    p = Ctl()
    cmd_id = p.new_id()
    assert [type(e) for e in p.command(HOLD.to_args(), cmd_id=cmd_id)] == [Acked, Reply]
    p.now += DAY
    p.uptime += DAY
    p.ask(Read.LOADPOINTS_GET)
    assert [type(e) for e in p.command(HOLD.to_args(), cmd_id=cmd_id)] == [Acked, Reply]
    assert p.box.commands.stats.acted == 2  # a day later the same cmdId is a new command
    p.now = p.grant.expires_at_ms
    events = p.command(Release("lp1").to_args())
    assert refused(events[:1])[0] == Code.E_GRANT_EXPIRED and events[1].reason == "expired"
    assert not p.box.has_session(1)


def test_cmds_per_hour_is_counted_per_agent() -> None:
    p = Ctl(caps={"cmds_per_hour": 1})
    assert [type(e) for e in p.command(HOLD.to_args())] == [Acked, Reply]
    assert refused(p.command(HOLD.to_args()))[0] == Code.E_RATE_LIMITED
    p.command(Release("lp1").to_args())
    private, key = generate_static()
    p.owner.put_agent(key, replace(p.grant, id="a2"), now_ms=p.now)
    p.box.set_roster(p.owner.roster)
    p.session = p.open(sid=1, private=private)  # the second agent on a fresh tunnel
    p.hello()
    p.ask(Read.LOADPOINTS_GET)
    assert [type(e) for e in p.command(HOLD.to_args())] == [Acked, Reply]


def test_a_long_history_of_requests_fits_one_answer() -> None:
    p = Ctl(caps={"pending_requests": 20, "reads_per_min": 60})
    note = "\u00e9" * 280  # the longest note, two bytes a character
    asked = []
    for i in range(300):
        p.now += 60_000
        body = {"goal": "site_mode", "args": {"mode": "idle"}, "note": note}
        asked.append(p.box.goals.ask(p.key, p.grant, body, p.now).req_id)
        p.box.goals.decide(asked[-1], i % 2 == 0, p.now)
    p.now += 60_000
    [listed] = p.exchange(p.session.request(Read.REQUESTS_GET.value)[1])
    ids = [r.req_id for r in listed.body.requests]
    assert 10 < len(ids) < 300 and ids == asked[::-1][: len(ids)]  # the newest, newest first


def test_what_the_box_echoes_of_a_hostile_message_is_bounded() -> None:
    p = Ctl()
    long = "x" * 16_200
    body = {
        "cmdId": p.new_id(),
        "op": "loadpoint.hold",
        "args": {"id": "lp1", "power_w": 1, "hold_s": 1, long: 1},
        "notValidAfterMs": p.uptime + 20_000,
        "expect": {"rev": p.box.home.controls.rev},
    }
    for t, b in [("cmd", body), (long, None), ("api.req" + long, None)]:
        [env] = p.raw(t, b)
        assert env.t == "error" and len(str(env.b)) < 300, env.b


def test_an_expiry_noticed_by_the_owners_look_is_still_pushed() -> None:
    p = Ctl()
    ask = {"goal": "site_mode", "args": {"mode": "idle"}}
    [q] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, ask)[1])
    p.now += DAY
    assert p.box.goals.waiting(p.now) == []  # the owner's console looked first
    [(_sid, push)] = p.box.expire_goals(p.now)
    [ev] = p.session.receive(push)
    assert ev.body == Decided(q.body.req_id, Decision.EXPIRED, EVENING + DAY)
    assert p.box.expire_goals(p.now) == []  # pushed once


def test_revoking_an_agent_ends_its_hold_and_its_session() -> None:
    p = Ctl()
    p.command(HOLD.to_args())
    assert p.lp1()["hold"] is not None
    p.owner.drop_agent(p.key, now_ms=p.now)
    [(_sid, terminate)] = p.box.set_roster(p.owner.roster)
    [ev] = p.session.receive(terminate)
    assert ev.reason == "revoked"
    lp = p.box.home.loadpoints(p.now)["loadpoints"][0]
    assert lp["hold"] is None and lp["power_w"] == 0


def test_a_frozen_home_holds_at_its_own_time() -> None:
    p = Ctl(start=EVENING - 18 * 3_600_000)  # 02:00 by the box's clock: the planner holds lp1
    p.box.frozen_ms = EVENING  # ... but the home answers as at 20:00 (--frozen-ms)
    ack, _result = p.command(HOLD.to_args())
    assert isinstance(ack, Acked) and ack.ack.expires_at_ms == EVENING + 600_000
    assert p.lp1()["hold"] == {"power_w": 7400, "untilMs": EVENING + 600_000}


@pytest.mark.parametrize(
    ("scopes", "ops", "mode"),
    [
        (CONTROL, (Op.LOADPOINT_HOLD.value,), "full"),
        (CONTROL, (), "readonly"),  # the owner approved reading only
        (READ_SCOPES, (Op.LOADPOINT_HOLD.value,), "readonly"),  # an op without its scope
    ],
)
def test_hello_ok_mode_says_what_the_grant_allows(
    scopes: tuple[str, ...], ops: tuple[str, ...], mode: str
) -> None:
    """Upstream `hello_ok.mode` (`full` / `readonly` of the web app's `BoxMode`): an agent
    that may command at least one op of its grant hears `full`, any other `readonly`."""
    p = Pair(scopes=scopes, ops=ops)
    [ev] = p.hello()
    assert isinstance(ev, Push) and ev.body["mode"] == mode


def test_caps_of_zero_refuse_in_words_and_do_not_break_the_box() -> None:
    """A grant may name a cap of 0 (a uint, PROTOCOL.md part B): the owner allows none. The
    box refuses with `E_CAP_EXCEEDED {cap, max: 0, asked: 1}` (waiting would not help), and a
    release is still never refused for the rate."""
    p = Ctl(caps={"cmds_per_hour": 0, "pending_requests": 0})
    cap = {"cap": "cmds_per_hour", "max": 0, "asked": 1}
    assert refused(p.command(HOLD.to_args())) == (Code.E_CAP_EXCEEDED, cap)
    goal = {"goal": "site_mode", "args": {"mode": "idle"}}
    [ev] = p.exchange(p.session.request(GoalMsg.GOAL_REQUEST.value, goal)[1])
    assert refusal_of(ev) == (
        Code.E_CAP_EXCEEDED,
        {"cap": "pending_requests", "max": 0, "asked": 1},
    )
    reads = Ctl(caps={"reads_per_min": 0}, start=EVENING)
    [ev] = reads.exchange(reads.session.request(Read.LIVE_GET.value)[1])
    assert refusal_of(ev) == (Code.E_CAP_EXCEEDED, {"cap": "reads_per_min", "max": 0, "asked": 1})


def refusal_of(ev: Any) -> tuple[str, dict[str, Any]]:
    assert isinstance(ev, Failed), ev
    return ev.refusal.code, ev.refusal.details
