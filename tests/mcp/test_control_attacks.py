"""Raw `tools/call`s of the control tools as a careless or hostile assistant sends them: every
refusal is words in a clean result (never a traceback, never the client's own hidden
characters echoed), and nothing the box could not read leaves the bridge."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import trio
import trio.testing

from ftwbridge.mcp.limits import SWEEP_BUCKETS_AT
from ftwbridge.mcp.words import sentence
from ftwbridge.proto.clean import clean

from .test_control import TOKEN, Homes, service
from .test_service import call, post


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("ev_charge_now", {"charger": "lp1", "power_w": 7400, "\x1b[31m\u202eevil\u200b": 1}),
        ("ev_stop", {"charger": "lp1", "\u2066" + "k" * 5000: 1}),
        ("goal_request", {"goal": "\u202eev_target\x07"}),
        ("requests_list", {"\ufeff\U000e0041": None}),
        ("chargers_list", {"\x9b2J": 1}),
    ],
)
async def test_invalid_arguments_are_told_in_clean_bounded_words(
    tool: str, arguments: dict[str, Any]
) -> None:
    homes = Homes()
    status, body = await post(service(homes, confirm_ttl_s=None), *call(tool, arguments))
    assert status == 200 and body["result"]["isError"] is True
    text = body["result"]["content"][0]["text"]
    assert text.startswith(f"The arguments for {tool} are not valid")
    assert clean(text) == text and len(text) < 1000
    assert homes.sent == [] and homes.asked == []


@pytest.mark.parametrize("by_ms", [2**53, 2**64, 10**30])
async def test_a_time_past_what_json_and_cbor_carry_is_refused_before_a_byte_leaves(
    by_ms: int,
) -> None:
    """A `by_ms` beyond 2**53 - 1 is not a time a JSON client can mean (RFC 8259 section 6),
    and past 2**64 - 1 CBOR needs a bignum tag the box refuses: the request would be dropped
    as undecodable and the call would hang until its deadline."""
    homes = Homes()
    goal = {"goal": "ev_target", "car": "car1", "soc_permille": 800, "by_ms": by_ms}
    _, body = await post(service(homes), *call("goal_request", goal))
    assert body["result"]["isError"] is True
    assert "by_ms" in body["result"]["content"][0]["text"]
    assert homes.asked == []


def _with_elicitation(body: dict[str, Any]) -> dict[str, Any]:
    body["params"]["_meta"] = {
        **body["params"]["_meta"],
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    return body


async def test_a_confirmed_charge_is_the_agents_latest_call_for_the_retry_rule() -> None:
    """A stop, then a charge the person confirmed, then the client reconnects and its second
    request (id 2 again) is a stop: that stop must go out as a new command. Were it taken for
    a retry of the first stop, the box would answer that stop's old result and leave the
    confirmed charge running while the assistant hears the hold is ended."""
    homes = Homes()
    svc = service(homes)
    stop, headers = call("ev_stop", {"charger": "lp1"})
    stop["id"] = 2
    await post(svc, stop, headers)
    charge, charge_headers = call("ev_charge_now", {"charger": "lp1", "power_w": 7400})
    _, asked = await post(svc, _with_elicitation(charge), charge_headers)
    charge["id"] = 3
    charge["params"] |= {
        "requestState": asked["result"]["requestState"],
        "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}},
    }
    _, done = await post(svc, charge, charge_headers)
    assert done["result"]["structuredContent"]["state"] == "applied"
    _, again = await post(svc, stop, headers)  # a new connection's id 2
    [first_stop, confirmed, second_stop] = [cmd_id for _op, _args, cmd_id in homes.sent]
    assert second_stop not in (first_stop, confirmed)
    assert again["result"]["structuredContent"]["cmdId"] == second_stop


@pytest.mark.parametrize("cap", ["cmds_per_hour", "reads_per_min", "pending_requests", "hold_s"])
def test_a_cap_of_zero_is_told_as_none_allowed(cap: str) -> None:
    words = sentence("E_CAP_EXCEEDED", {"cap": cap, "max": 0, "asked": 1}, None)
    assert "allows this assistant no " in words and "0" not in words


async def test_per_agent_request_buckets_are_forgotten_once_refilled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The `/mcp` request limit keeps a bucket per agent; a bucket that has refilled is the
    same as none, so many agents that came once leave nothing behind."""
    svc = service(Homes())
    for n in range(3000):
        record = dataclasses.replace(TOKEN, agent_key=n.to_bytes(32, "big"))
        assert svc._http_limit(record, 1) is None
    await trio.sleep(60)
    for n in range(3000, 3000 + SWEEP_BUCKETS_AT):
        record = dataclasses.replace(TOKEN, agent_key=n.to_bytes(32, "big"))
        assert svc._http_limit(record, 1) is None
    assert len(svc._requests) <= SWEEP_BUCKETS_AT
