"""Part E's control messages: builders round-trip, and every malformed field is a `BadBody`."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftwbridge.proto.control import (
    BadBody,
    Cmd,
    CmdAck,
    CmdError,
    CmdResult,
    CmdState,
    Decided,
    Decision,
    EvTarget,
    GoalQueued,
    GoalRecord,
    GoalRequest,
    Hold,
    Release,
    RequestList,
    RequestState,
    SiteMode,
    new_cmd_id,
    not_valid_after_ms,
    parse_hold_args,
)
from ftwbridge.proto.envelope import dumps, loads
from ftwbridge.proto.names import Goal, Mode

CMD_ID = new_cmd_id(1_790_000_000_000, bytes(range(10)))


def test_cmd_id_is_a_uuid7() -> None:
    import uuid

    u = uuid.UUID(CMD_ID)
    assert u.version == 7 and u.variant == uuid.RFC_4122 and str(u) == CMD_ID
    assert int(CMD_ID.replace("-", "")[:12], 16) == 1_790_000_000_000
    with pytest.raises(ValueError):
        new_cmd_id(1, b"short")


def test_not_valid_after_adds_elapsed_and_20_s() -> None:
    assert not_valid_after_ms(5_000, 1_000) == 26_000
    assert not_valid_after_ms(5_000, -50) == 25_000  # a clock that stepped back adds nothing


ROUND_TRIPS: list[Any] = [
    Cmd(CMD_ID, "loadpoint.hold", Hold("lp1", 7400, 900).to_args(), 30_000, 4),
    CmdAck(CMD_ID, "lease-1", 1_790_000_900_000),
    CmdResult(CMD_ID, CmdState.APPLIED, {"power_w": 7400, "untilMs": 1}),
    CmdResult(CMD_ID, CmdState.REJECTED, None, CmdError("E_PRECONDITION", {"why": "x"})),
    GoalQueued("r1", 5),
    Decided("r1", Decision.APPROVED, 9),
    GoalRequest(Goal.EV_TARGET, EvTarget("car1", 800, 77), "by seven"),
    GoalRequest(Goal.SITE_MODE, SiteMode(Mode.SELF_CONSUMPTION)),
    RequestList(
        (
            GoalRecord("r1", Goal.SITE_MODE, SiteMode(Mode.IDLE), RequestState.PENDING, 3),
            GoalRecord("r2", Goal.EV_TARGET, EvTarget("c", 1, 2), RequestState.DENIED, 3, "n", 4),
        )
    ),
]


@pytest.mark.parametrize("msg", ROUND_TRIPS, ids=lambda m: type(m).__name__)
def test_round_trip_through_cbor(msg: Any) -> None:
    assert type(msg).parse(loads(dumps(msg.to_body()))) == msg


def test_cmd_body_keys_in_contract_order() -> None:
    body = ROUND_TRIPS[0].to_body()
    assert list(body) == ["cmdId", "op", "args", "notValidAfterMs", "expect"]
    assert body["expect"] == {"rev": 4}


def test_hold_args() -> None:
    assert parse_hold_args({"id": "lp1", "power_w": 1, "hold_s": 60}) == Hold("lp1", 1, 60)
    assert parse_hold_args({"id": "lp1", "power_w": 1}) == Hold("lp1", 1, None)  # lasting
    assert parse_hold_args({"id": "lp1", "power_w": 1, "hold_s": 0}) == Hold("lp1", 1, None)
    assert parse_hold_args({"id": "lp1", "clear": True}) == Release("lp1")
    assert Release("lp1").to_args() == {"id": "lp1", "clear": True}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"id": "lp1", "power_w": 0, "hold_s": 60}, "args.power_w"),
        ({"id": "lp1", "power_w": True, "hold_s": 60}, "args.power_w"),
        ({"id": "lp1", "power_w": 1.5, "hold_s": 60}, "args.power_w"),
        ({"id": "lp1", "power_w": 10, "hold_s": -1}, "args.hold_s"),
        ({"id": "", "power_w": 10}, "args.id"),
        ({"id": "x" * 65, "power_w": 10}, "args.id"),
        ({"power_w": 10}, "args.id"),
        ({"id": "lp1", "power_w": 10, "powerW": 3}, "args.powerW"),
        ({"id": "lp1", "clear": 1}, "args.clear"),
        ({"id": "lp1", "clear": True, "power_w": 3}, "args.power_w"),
    ],
)
def test_bad_hold_args(args: dict[str, Any], field: str) -> None:
    with pytest.raises(BadBody) as info:
        parse_hold_args(args)
    assert info.value.field == field


GOOD_CMD = ROUND_TRIPS[0].to_body()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cmdId": "not-a-uuid"}, "cmdId"),
        ({"cmdId": CMD_ID.upper()}, "cmdId"),
        ({"cmdId": "0190a0b0-0000-4000-8000-000000000000"}, "cmdId"),  # v4, not v7
        ({"cmdId": 7}, "cmdId"),
        ({"op": ""}, "op"),
        ({"op": None}, "op"),
        ({"args": [1]}, "args"),
        ({"args": {1: 2}}, "args"),
        ({"notValidAfterMs": -1}, "notValidAfterMs"),
        ({"notValidAfterMs": 2**64}, "notValidAfterMs"),
        ({"expect": {}}, "rev"),
        ({"expect": 3}, "expect"),
        ({"expect": {"rev": "3"}}, "rev"),
    ],
)
def test_bad_cmd_fields(change: dict[str, Any], field: str) -> None:
    with pytest.raises(BadBody) as info:
        Cmd.parse(GOOD_CMD | change)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("cls", "body", "field"),
    [
        (Cmd, None, "b"),
        (Cmd, [1, 2], "b"),
        (CmdAck, {"cmdId": CMD_ID, "leaseId": "", "expiresAtMs": 1}, "leaseId"),
        (CmdResult, {"cmdId": CMD_ID, "state": "done"}, "state"),
        (CmdResult, {"cmdId": CMD_ID, "state": "applied", "observed": 5}, "observed"),
        (CmdResult, {"cmdId": CMD_ID, "state": "rejected", "error": {"code": "oops"}}, "error.code"),
        (GoalQueued, {"reqId": "r", "expiresAtMs": "soon"}, "expiresAtMs"),
        (Decided, {"reqId": "r", "decision": "maybe", "atMs": 1}, "decision"),
        (GoalRequest, {"goal": "fly", "args": {}}, "goal"),
        (GoalRequest, {"goal": "ev_target", "args": {"car": "c", "soc_permille": 0, "byMs": 1}}, "args.soc_permille"),
        (GoalRequest, {"goal": "ev_target", "args": {"car": "c", "soc_permille": 1001, "byMs": 1}}, "args.soc_permille"),
        (GoalRequest, {"goal": "site_mode", "args": {"mode": "turbo"}}, "args.mode"),
        (GoalRequest, {"goal": "site_mode", "args": {"mode": "idle", "x": 1}}, "args.x"),
        (GoalRequest, {"goal": "site_mode", "args": {"mode": "idle"}, "note": "n" * 281}, "note"),
        (RequestList, {"requests": {}}, "requests"),
        (RequestList, {"requests": [{"reqId": "r"}] * 257}, "requests"),
        (RequestList, {"requests": [{"reqId": "r", "goal": "site_mode", "args": {"mode": "idle"}, "state": "lost", "atMs": 1}]}, "state"),
    ],
)  # fmt: skip
def test_bad_bodies(cls: Any, body: Any, field: str) -> None:
    with pytest.raises(BadBody) as info:
        cls.parse(body)
    assert info.value.field == field


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=5)
    ),
    max_leaves=20,
)


@given(st.sampled_from(ROUND_TRIPS), st.data())
def test_nothing_but_bad_body_escapes(msg: Any, data: st.DataObject) -> None:
    """A good body with one field (or one field of its `args`) replaced by anything."""
    body = msg.to_body()
    key = data.draw(st.sampled_from(sorted(body)))
    if key == "args" and isinstance(body["args"], dict) and body["args"]:
        inner = data.draw(st.sampled_from(sorted(body["args"])))
        body["args"] = body["args"] | {inner: data.draw(VALUES)}
    else:
        body[key] = data.draw(VALUES)
    with contextlib.suppress(BadBody):
        type(msg).parse(body)
