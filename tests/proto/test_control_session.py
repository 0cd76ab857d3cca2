"""The bridge's session with part E's messages, fed by hand-made box messages (sans-I/O).

A command stays the one request in flight until `cmd.result` (`cmd.ack` does not end it); a
pushed `agent.decided` answers no call; every malformed control answer ends its call with
`E_BAD_BODY` and leaks no request in flight.
"""

from __future__ import annotations

from typing import Any

import pytest

from ftwbridge.proto.control import CmdAck, CmdResult, CmdState, Decided, Decision, Hold, new_cmd_id
from ftwbridge.proto.envelope import Envelope
from ftwbridge.proto.errors import LocalProtocolError
from ftwbridge.proto.names import Code, GoalMsg, Read
from ftwbridge.proto.registry import Msg
from ftwbridge.proto.session import Acked, Channel, Failed, Push, Reply
from tests.stubbox.test_box_pair import NOW, Pair

CMD_ID = new_cmd_id(NOW, b"\x01" * 10)
OTHER_ID = new_cmd_id(NOW, b"\x02" * 10)
HOLD = Hold("lp1", 7400, 600).to_args()


def ready() -> tuple[Pair, Channel]:
    """A session that has seen `hello_ok` (uptime 1000 at NOW) and a `live` (a controlRev)."""
    p = Pair()
    p.hello()
    box = p.box._sessions[1].channel
    rid, _ = p.session.request(Read.LIVE_GET.value)
    p.session.receive(
        box.wrap(Envelope("live", rid, {"controlRev": 41, "uptimeMs": 5_000})), now_ms=NOW
    )
    return p, box


def test_command_needs_a_rev_and_an_uptime() -> None:
    p = Pair()
    with pytest.raises(LocalProtocolError, match="controlRev"):
        p.session.command("loadpoint.hold", HOLD, cmd_id=CMD_ID, now_ms=NOW)
    with pytest.raises(LocalProtocolError, match="uptime"):
        p.session.command("loadpoint.hold", HOLD, cmd_id=CMD_ID, now_ms=NOW, expect_rev=1)
    with pytest.raises(LocalProtocolError, match="command"):
        p.session.request(Msg.CMD.value, {})
    assert not p.session.busy


def test_cmd_body_carries_rev_and_expiry_in_box_uptime() -> None:
    p, box = ready()
    rid, message = p.session.command("loadpoint.hold", HOLD, cmd_id=CMD_ID, now_ms=NOW + 3_000)
    env = box.unwrap(message)
    assert env is not None and env.t == "cmd" and env.id == rid
    assert env.b == {
        "cmdId": CMD_ID,
        "op": "loadpoint.hold",
        "args": HOLD,
        "notValidAfterMs": 5_000 + 3_000 + 20_000,
        "expect": {"rev": 41},
    }


def test_ack_keeps_the_command_in_flight_until_its_result() -> None:
    p, box = ready()
    rid, _ = p.session.command("loadpoint.hold", HOLD, cmd_id=CMD_ID, now_ms=NOW)
    ack = CmdAck(CMD_ID, "lease-1", NOW + 600_000)
    assert p.session.receive(box.wrap(Envelope("cmd.ack", rid, ack.to_body()))) == [Acked(rid, ack)]
    assert p.session.busy
    with pytest.raises(LocalProtocolError):
        p.session.request(Read.LIVE_GET.value)
    result = CmdResult(CMD_ID, CmdState.APPLIED, {"power_w": 7000, "untilMs": 1})
    body = result.to_body() | {"controlRev": 42}
    [ev] = p.session.receive(box.wrap(Envelope("cmd.result", rid, body)))
    assert isinstance(ev, Reply) and ev.t == "cmd.result" and ev.body == result
    assert not p.session.busy and p.session.control_rev == 42


def test_refusal_before_acting_ends_the_command() -> None:
    p, box = ready()
    rid, _ = p.session.command("loadpoint.hold", HOLD, cmd_id=CMD_ID, now_ms=NOW)
    err = {"code": "E_CONFLICT", "retryable": True}
    [ev] = p.session.receive(box.wrap(Envelope("error", rid, err)))
    assert isinstance(ev, Failed) and ev.refusal.code == Code.E_CONFLICT and not p.session.busy


BAD_ANSWERS: list[tuple[str, Any]] = [
    ("cmd.result", {"cmdId": OTHER_ID, "state": "applied"}),  # another command's result
    ("cmd.ack", {"cmdId": OTHER_ID, "leaseId": "l", "expiresAtMs": 1}),
    ("cmd.result", {"cmdId": CMD_ID, "state": "half-done"}),
    ("cmd.result", "applied"),
    ("cmd.ack", {"cmdId": CMD_ID}),
    ("live", {"controlRev": 1}),  # a read's answer on a command's id
    ("goal.queued", {"reqId": "r", "expiresAtMs": 1}),
]


@pytest.mark.parametrize(("t", "body"), BAD_ANSWERS)
def test_malformed_command_answers_end_the_call_with_bad_body(t: str, body: Any) -> None:
    p, box = ready()
    rid, _ = p.session.command("loadpoint.hold", HOLD, cmd_id=CMD_ID, now_ms=NOW)
    [ev] = p.session.receive(box.wrap(Envelope(t, rid, body)))
    assert isinstance(ev, Failed) and ev.refusal.code == Code.E_BAD_BODY and not p.session.busy


@pytest.mark.parametrize(
    ("t", "answer", "body"),
    [
        (GoalMsg.GOAL_REQUEST.value, "goal.queued", {"reqId": 5, "expiresAtMs": 1}),
        (GoalMsg.GOAL_REQUEST.value, "requests", {"requests": []}),
        (Read.REQUESTS_GET.value, "requests", {"requests": [{"reqId": "r"}]}),
        (Read.REQUESTS_GET.value, "requests", None),
    ],
)
def test_malformed_goal_answers_end_the_call_with_bad_body(t: str, answer: str, body: Any) -> None:
    p, box = ready()
    rid, _ = p.session.request(t, None)
    [ev] = p.session.receive(box.wrap(Envelope(answer, rid, body)))
    assert isinstance(ev, Failed) and ev.refusal.code == Code.E_BAD_BODY and not p.session.busy


def test_agent_decided_during_a_read_answers_no_call() -> None:
    p, box = ready()
    rid, _ = p.session.request(Read.CARS_GET.value)
    decided = Decided("r1", Decision.APPROVED, NOW)
    events = p.session.receive(box.wrap(Envelope("agent.decided", None, decided.to_body())))
    assert events == [Push("agent.decided", decided)] and p.session.busy
    # a malformed push is dropped and counted; the read is still in flight
    assert p.session.receive(box.wrap(Envelope("agent.decided", None, {"reqId": 1}))) == []
    assert p.session.bad_pushes == 1 and p.session.busy
    [ev] = p.session.receive(box.wrap(Envelope("cars", rid, {"cars": []})))
    assert isinstance(ev, Reply) and ev.id == rid and not p.session.busy
