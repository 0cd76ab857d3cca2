"""A person's consent parses closed, is final, and is asked in every client (docs/control.md,
"Confirmation by the person" and "Retries").

Raw MRTR rounds as an attacker sends them: only `{"action": "accept", "content": {"confirm":
true}}` is consent; after a decline or a cancel the same `requestState` never acts; a replayed
acceptance or a retried call answers with the first attempt's answer, saying so and when it
was observed. Clients that cannot elicit (the official `mcp` client in legacy mode, a
2026-07-28 client without elicitation) get a preview and a confirmation token first.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import ElicitResult

from ftwbridge.config import Config
from ftwbridge.mcp.confirm import Confirmed, ConfirmStates, StateExpired
from ftwbridge.mcp.finals import MAX_PER_PRINCIPAL, FinalAnswers
from ftwbridge.mcp.firsts import FirstAnswers
from ftwbridge.pool.command import CommandOutcome
from ftwbridge.proto.control import CmdError, CmdResult, CmdState

from .test_control import CHARGE, Clock, Homes, client, service
from .test_service import call, post

ELICITS = {"elicitation": {}}


def charge_call(rid: int = 1, caps: Any = ELICITS, **params: Any) -> tuple[Any, Any]:
    body, headers = call("ev_charge_now", CHARGE)
    body["id"] = rid
    meta = body["params"]["_meta"]
    body["params"]["_meta"] = {**meta, "io.modelcontextprotocol/clientCapabilities": caps}
    body["params"] |= params
    return body, headers


async def asked_state(svc: Any, rid: int = 1) -> str:
    _, first = await post(svc, *charge_call(rid))
    assert first["result"]["resultType"] == "input_required"
    return str(first["result"]["requestState"])


YES = {"action": "accept", "content": {"confirm": True}}


@pytest.mark.parametrize(
    "response",
    [
        {"action": "accept", "content": {"confirm": "false"}},
        {"action": "accept", "content": {"confirm": "true"}},
        {"action": "accept", "content": {"confirm": 1}},
        {"action": "accept", "content": {"confirm": False}},
        {"action": "accept"},
        {"action": "accept", "content": None},
        {"action": "accept", "content": "yes"},
        {"action": "accept", "content": [True]},
        {"action": "accept", "content": {"confirm": True, "also": "charge at 22 kW"}},
        {"action": "accept", "content": {"Confirm": True}},
        {"action": "accept", "content": {"confirm": True}, "action2": "x"},
    ],
)
async def test_only_a_well_formed_acceptance_is_consent(response: Any) -> None:
    homes = Homes()
    svc = service(homes)
    state = await asked_state(svc)
    body, headers = charge_call(2, requestState=state, inputResponses={"confirm": response})
    status, out = await post(svc, body, headers)
    assert status == 200 and out["result"]["isError"], out
    assert "did not confirm" in out["result"]["content"][0]["text"]
    assert homes.sent == []


@pytest.mark.parametrize("action", ["decline", "cancel", "accept-false"])
async def test_after_a_decline_the_same_state_never_acts(action: str) -> None:
    homes = Homes()
    svc = service(homes)
    state = await asked_state(svc)
    no: dict[str, Any] = {"action": action}
    if action == "accept-false":
        no = {"action": "accept", "content": {"confirm": False}}
    await post(svc, *charge_call(2, requestState=state, inputResponses={"confirm": no}))
    for rid in (3, 4):  # then an acceptance of the same question, twice
        _, out = await post(
            svc, *charge_call(rid, requestState=state, inputResponses={"confirm": YES})
        )
        assert out["result"]["isError"] and "did not confirm" in str(out["result"]), out
    assert homes.sent == []
    fresh = await asked_state(svc, 5)  # a new question can still be answered yes
    _, out = await post(svc, *charge_call(6, requestState=fresh, inputResponses={"confirm": YES}))
    assert out["result"]["structuredContent"]["state"] == "applied" and len(homes.sent) == 1


async def test_a_replayed_acceptance_says_it_is_the_first_answer_and_when() -> None:
    homes = Homes()
    clock = Clock()
    svc = service(homes, clock)
    state = await asked_state(svc)
    accept = {"requestState": state, "inputResponses": {"confirm": YES}}
    _, first = await post(svc, *charge_call(2, **accept))
    observed_at = clock.ms
    clock.ms += 45_000
    _, again = await post(svc, *charge_call(3, **accept))  # replayed, 45 s on
    one, two = first["result"]["structuredContent"], again["result"]["structuredContent"]
    assert len(homes.sent) == 1  # nothing went to the box again
    assert "repeated" not in one and one["observedAtMs"] == observed_at
    assert two["cmdId"] == one["cmdId"] and two["repeated"] is True
    assert two["observedAtMs"] == observed_at and two["firstSentAtMs"] == observed_at
    assert "not what it does now" in two["message"] and "Charging as asked" in one["message"]
    assert "Charging as asked" not in two["message"]


def test_forgotten_answers_never_turn_a_decline_into_consent() -> None:
    """Past `MAX_PER_PRINCIPAL` answered states of one assistant its oldest is forgotten, and
    every state of that assistant that expires no later is refused as expired from then on
    (asked again); another assistant's questions are untouched by it."""
    states = ConfirmStates(ttl_s=120)
    first = states.seal(principal="p", digest="d", cmd_id="c0", now_ms=0)
    theirs = states.seal(principal="q", digest="d", cmd_id="q0", now_ms=0)
    opened = states.open(first, principal="p", digest="d", now_ms=1)
    assert states.settle(opened, "decline", now_ms=1) == "decline"
    for i in range(1, MAX_PER_PRINCIPAL + 1):  # the same assistant answers many more
        states.settle(Confirmed(f"c{i}", 120_000 + i, "p"), "decline", now_ms=2)
    with pytest.raises(StateExpired):
        states.open(first, principal="p", digest="d", now_ms=3)
    assert states.open(theirs, principal="q", digest="d", now_ms=3).cmd_id == "q0"


def test_the_bound_on_assistants_fails_closed_too() -> None:
    finals = FinalAnswers(per_principal=4, principals=2)
    assert finals.settle("a", "x", "decline", expires_ms=100, now_ms=0) == "decline"
    finals.settle("b", "y", "accept", expires_ms=100, now_ms=0)
    finals.settle("c", "z", "accept", expires_ms=100, now_ms=0)  # "a" is forgotten: void
    assert finals.void_to("a") == 100 and finals.void_to("b") == 0


async def test_a_legacy_client_gets_a_preview_then_charges_on_the_confirmation() -> None:
    """The official client at 2025-11-25 (no elicitation): a preview in plain words, nothing
    sent; the second call carrying the token sends the charge once."""
    homes = Homes()
    async with client(service(homes), mode="legacy") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "confirmation" in tools["ev_charge_now"].input_schema["properties"]
        assert "show its question to the person" in (tools["ev_charge_now"].description or "")
        preview = await c.call_tool("ev_charge_now", CHARGE)
        shown = preview.structured_content
        assert not preview.is_error and shown is not None and homes.sent == []
        assert shown["state"] == "awaiting_confirmation"
        assert shown["question"] == (
            "Charge Garage charger at 7.4 kW for 15 minutes? It stops by itself after that."
        )
        assert "Show the person the question" in shown["message"]
        token = shown["confirmation"]
        other = await c.call_tool(
            "ev_charge_now", CHARGE | {"power_w": 11000, "confirmation": token}
        )
        assert other.structured_content["state"] == "awaiting_confirmation"  # type: ignore[index]
        assert other.structured_content["message"].startswith("The confirmation given is not")  # type: ignore[index]
        assert homes.sent == []
        done = await c.call_tool("ev_charge_now", CHARGE | {"confirmation": token})
        assert done.structured_content["state"] == "applied"  # type: ignore[index]
        assert homes.sent == [
            ("loadpoint.hold", {"id": "lp1", "power_w": 7400, "hold_s": 900}, shown["cmdId"])
        ]
        again = await c.call_tool("ev_charge_now", CHARGE | {"confirmation": token})
        assert again.structured_content["repeated"] is True and len(homes.sent) == 1  # type: ignore[index]


async def test_a_preview_token_expires_and_is_no_request_state() -> None:
    homes = Homes()
    clock = Clock()
    svc = service(homes, clock)
    _, out = await post(svc, *charge_call(1, caps={}))
    token = out["result"]["structuredContent"]["confirmation"]
    status, out = await post(  # a preview's token is not a requestState, nor the reverse
        svc, *charge_call(2, requestState=token, inputResponses={"confirm": YES})
    )
    assert status == 400 and out["error"]["code"] == -32602
    state = await asked_state(svc, 3)
    body, headers = charge_call(4, caps={})
    body["params"]["arguments"] = CHARGE | {"confirmation": state}
    _, out = await post(svc, body, headers)
    assert out["result"]["structuredContent"]["state"] == "awaiting_confirmation"
    clock.ms += 120_000
    body["params"]["arguments"] = CHARGE | {"confirmation": token}
    _, out = await post(svc, body, headers)
    again = out["result"]["structuredContent"]
    assert again["message"].startswith("That confirmation ran out. Nothing was done yet")
    assert again["question"].startswith("Charge Garage charger") and again["confirmation"] != token
    assert homes.sent == []


async def test_the_setting_chooses_elicit_preview_or_off() -> None:
    async def yes(ctx: Any, params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"confirm": True})

    homes = Homes()
    svc = service(homes, confirm_mode="preview")
    async with client(svc, elicit=yes) as c:  # it could elicit; the deployment previews
        out = await c.call_tool("ev_charge_now", CHARGE)
    assert out.structured_content["state"] == "awaiting_confirmation" and homes.sent == []  # type: ignore[index]
    base = {"state_dir": "/tmp/x", "public_url": "https://b.example"}
    assert Config(**base).confirm_commands == "elicit"
    for given, read in ((True, "elicit"), ("false", "off"), ("preview", "preview")):
        assert Config(**base, confirm_commands=given).confirm_commands == read


async def test_a_retried_refused_command_says_its_refusal_is_the_first_attempts() -> None:
    """The box rejected the first try (a grid outage); the client's retry (same id and
    arguments) is answered with that refusal, said to be the first attempt's, and nothing is
    sent again."""

    class Refusing(Homes):
        async def command(
            self, home: str, agent_key: bytes, op: str, args: dict[str, Any], cmd_id: str
        ) -> CommandOutcome:
            self.sent.append((op, args, cmd_id))
            error = CmdError("E_PRECONDITION", {"blockedBy": ["grid_outage"]})
            return CommandOutcome(cmd_id, None, CmdResult(cmd_id, CmdState.REJECTED, None, error))

    homes = Refusing()
    clock = Clock()
    svc = service(homes, clock, confirm_ttl_s=None)
    body, headers = call("ev_stop", {"charger": "lp1"})
    _, first = await post(svc, body, headers)
    clock.ms += 5_000
    _, again = await post(svc, body, headers)
    assert first["result"]["isError"] and again["result"]["isError"]
    text = again["result"]["content"][0]["text"]
    assert text.startswith(first["result"]["content"][0]["text"])
    assert "answer of its first attempt" in text and "first attempt" not in str(first)
    assert again["result"]["_meta"]["ftwbridge/repeated"] == {
        "firstSentAtMs": 1_000_000,
        "observedAtMs": 1_000_000,
    }
    assert len(homes.sent) == 1


def test_one_assistants_many_commands_never_make_another_forget_its_first_answer() -> None:
    firsts = FirstAnswers(per_agent=4, agents=100)
    assert firsts.begin(("h", b"b", "theirs"), now_ms=1) is None
    firsts.done(("h", b"b", "theirs"), "outcome", observed_ms=2)
    for i in range(1_000):  # another assistant's flood of commands
        firsts.begin(("h", b"a", f"c{i}"), now_ms=3)
    held = firsts.begin(("h", b"b", "theirs"), now_ms=4)
    assert held is not None and held.outcome == "outcome" and held.observed_ms == 2
    assert firsts.begin(("h", b"a", "c0"), now_ms=5) is None  # its own oldest: forgotten
