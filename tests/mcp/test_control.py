"""The control tools at `/mcp` without sockets (docs/control.md): schemas, step-up
scopes, the bridge's own refusals, the retry rule, and the person's confirmation (MCP
2026-07-28 multi round-trip requests) through the official `mcp` client's elicitation callback.

The client talks to `McpService` through an httpx2 transport that hands each request to
`service.handle`, so the bridge's wall clock is the test's to move (expired states). The home
is a small fake port that records the commands it was asked to send; tests/e2e/test_control.py
runs the same tools against the real pool and stub box.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from ftwbridge.mcp.cmdids import RETRY_WINDOW_S, CommandIds, call_digest
from ftwbridge.mcp.confirm import ConfirmStates, StateExpired, StateRefused
from ftwbridge.mcp.server import HttpRequest, McpService
from ftwbridge.pool.command import CommandOutcome
from ftwbridge.proto.control import CmdAck, CmdResult, CmdState, new_cmd_id
from ftwbridge.proto.goals import GoalQueued, RequestList
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply

from .test_service import RECORD, RESOURCE, call, post

CONTROL = ("ftw.assets.read", "ftw.dispatch.write", "ftw.goals.write")
TOKEN = dataclasses.replace(RECORD, scopes=CONTROL)
GRANT = AgentGrant("a1", "c", "n", CONTROL, ("loadpoint.hold",), {}, 0, 2**62)
LOADPOINTS = {"loadpoints": [{"id": "lp1", "name": "Garage\u202e charger"}]}


class Homes:
    """The control port, answering as a box that applies every command."""

    def __init__(self, grant: AgentGrant | None = GRANT) -> None:
        self.grant_ = grant
        self.sent: list[tuple[str, dict[str, Any], str]] = []
        self.asked: list[tuple[str, Any]] = []
        self.refusal: Refusal | None = None
        self.made: list[str] = []

    async def call(self, home: str, agent_key: bytes, read: str, body: Any) -> Reply:
        self.asked.append((read, body))
        if read == "goal.request":
            return Reply(1, "goal.queued", GoalQueued("req-1", 99))
        if read == "requests.get":
            return Reply(1, "requests", RequestList(()))
        return Reply(1, "loadpoints", LOADPOINTS)

    async def grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        return self.grant_

    async def command(
        self, home: str, agent_key: bytes, op: str, args: dict[str, Any], cmd_id: str
    ) -> CommandOutcome:
        self.sent.append((op, args, cmd_id))
        if self.refusal is not None:
            raise self.refusal
        observed = {"power_w": args.get("power_w", 0), "untilMs": 5000}
        result = CmdResult(cmd_id, CmdState.APPLIED, observed)
        return CommandOutcome(cmd_id, CmdAck(cmd_id, "lease", 4000), result)

    def new_cmd_id(self) -> str:
        self.made.append(new_cmd_id(1_700_000_000_000, len(self.made).to_bytes(10, "big")))
        return self.made[-1]


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def service(
    homes: Homes,
    clock: Clock | None = None,
    confirm_ttl_s: float | None = 120.0,
    confirm_mode: Any = "elicit",
) -> McpService:
    async def verify(token: str) -> Any:
        return TOKEN if token == "good" else None

    return McpService(
        homes=homes,
        verify_token=verify,
        resource=RESOURCE,
        resource_metadata=RESOURCE + "-meta",
        max_body_bytes=1 << 20,
        call_deadline_s=5,
        wall_ms=clock or Clock(),
        confirm_ttl_s=confirm_ttl_s,
        confirm_mode=confirm_mode,
    )


def client(svc: McpService, mode: str = "2026-07-28", elicit: Any = None) -> Client:
    """The official client, its requests handed to `svc.handle` (no sockets)."""

    async def handle(request: httpx2.Request) -> httpx2.Response:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.multi_items():
            headers.setdefault(name.lower(), []).append(value)
        headers.setdefault("authorization", ["Bearer good"])
        body = request.content

        async def read() -> bytes:
            return body

        resp = await svc.handle(HttpRequest(request.method, headers, read, len(body)))
        return httpx2.Response(resp.status, headers=resp.headers, content=resp.body)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handle))
    kwargs = {} if elicit is None else {"elicitation_callback": elicit}
    return Client(streamable_http_client(RESOURCE, http_client=http), mode=mode, **kwargs)


async def test_tools_list_shows_control_with_its_annotations() -> None:
    async with client(service(Homes())) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    charge, stop, goal, listed = (
        tools[n] for n in ("ev_charge_now", "ev_stop", "goal_request", "requests_list")
    )
    assert charge.annotations is not None and charge.annotations.destructive_hint is True
    assert charge.annotations.read_only_hint is False
    assert stop.annotations is not None and stop.annotations.idempotent_hint is True
    assert goal.annotations is not None and goal.annotations.read_only_hint is False
    assert listed.annotations is not None and listed.annotations.read_only_hint is True
    assert {v["properties"]["goal"]["const"] for v in goal.input_schema["oneOf"]} == {
        "ev_target",
        "site_mode",
    }


@pytest.mark.parametrize(
    ("tool", "scope"),
    [
        ("ev_charge_now", "ftw.dispatch.write"),
        ("ev_stop", "ftw.dispatch.write"),
        ("goal_request", "ftw.goals.write"),
        ("requests_list", "ftw.goals.write"),
    ],
)
async def test_a_read_only_token_gets_a_step_up_challenge(tool: str, scope: str) -> None:
    homes = Homes()
    svc = service(homes)

    async def verify(token: str) -> Any:
        return RECORD

    svc._auth._verify_token = verify
    status, body = await post(svc, *call(tool, {"charger": "lp1"}))
    assert status == 403 and body["error"]["data"] == {"requiredScopes": [scope]}
    assert homes.sent == [] and homes.asked == []


async def test_bridge_refuses_in_words_before_a_byte_leaves() -> None:
    no_ops = Homes(dataclasses.replace(GRANT, ops=()))
    _, body = await post(service(no_ops), *call("ev_stop", {"charger": "lp1"}))
    assert (
        body["result"]["isError"]
        and "not allowed to do loadpoint.hold" in (body["result"]["content"][0]["text"])
    )
    short = Homes(dataclasses.replace(GRANT, caps={"hold_s": 600}))
    _, body = await post(
        service(short), *call("ev_charge_now", {"charger": "lp1", "power_w": 7400, "minutes": 11})
    )
    assert "at most 600 s" in body["result"]["content"][0]["text"]
    for bad in (
        {"charger": "lp1", "power_w": 0},
        {"charger": "lp1\nINFO forged", "power_w": 7400},
        {"charger": "lp1", "power_w": 7400, "minutes": 15, "extra": 1},
        {"charger": "lp1", "power_w": "7400"},
    ):
        _, body = await post(service(short), *call("ev_charge_now", bad))
        assert body["result"]["isError"] and "not valid" in body["result"]["content"][0]["text"]
    for goal in (
        {"goal": "ev_target", "car": "car1", "soc_permille": 800, "by_ms": 5, "x": 1},
        {"goal": "site_mode", "mode": "party"},
        {"goal": "dishwasher"},
        {"goal": "ev_target", "car": "car1", "soc_permille": 800, "by_ms": 5},  # in the past
    ):
        _, body = await post(service(short), *call("goal_request", goal))
        assert body["result"]["isError"], goal
    assert no_ops.sent == short.sent == [] and short.asked == []


async def test_box_refusals_reach_the_assistant_in_words() -> None:
    homes = Homes()
    svc = service(homes, confirm_ttl_s=None)
    cases = [
        (Refusal("E_NEEDS_OWNER", {"op": "loadpoint.hold", "why": "held"}), "Someone else holds"),
        (Refusal("E_NOT_FOUND", {"what": "hold", "id": "lp1"}), "no hold by this assistant"),
        (Refusal("E_PRECONDITION"), "state changed"),
        (Refusal("E_RATE_LIMITED", {"retryAfterMs": 4000}, 4000), "try again in 4 s"),
    ]
    for refusal, words in cases:
        homes.refusal = refusal
        _, body = await post(svc, *call("ev_stop", {"charger": "lp1"}))
        assert body["result"]["isError"] and words in body["result"]["content"][0]["text"]


def test_the_retry_rule_reuses_a_cmd_id_for_60_s() -> None:
    made = iter(range(100))
    ids = CommandIds(lambda: f"id-{next(made)}")
    digest = call_digest("ev_stop", {"charger": "lp1"})
    same = {"home": "h", "agent_key": b"k", "digest": digest}
    first = ids.cmd_id(rid=7, now_s=0.0, **same)
    assert ids.cmd_id(rid=7, now_s=RETRY_WINDOW_S - 1, **same) == first
    assert ids.cmd_id(rid=7, now_s=RETRY_WINDOW_S + 0.5, **same) != first  # too late
    for other in (
        {"rid": "7"},  # another JSON-RPC id (text, not the number)
        {"rid": 8},
        {"digest": call_digest("ev_stop", {"charger": "lp2"})},
        {"agent_key": b"j"},
    ):
        again = ids.cmd_id(rid=7, now_s=100.0, **same)
        assert ids.cmd_id(**({"rid": 7, "now_s": 101.0} | same | other)) != again
    assert call_digest("t", {"a": 1, "b": 2}) == call_digest("t", {"b": 2, "a": 1})


def test_a_call_the_agent_followed_with_another_is_no_longer_a_retry() -> None:
    """A client that reconnects restarts its JSON-RPC ids: its stop with id 2 after a new
    charge is a new command, not the stop another connection sent with id 2 before."""
    made = iter(range(100))
    ids = CommandIds(lambda: f"id-{next(made)}")
    stop = {"home": "h", "agent_key": b"k", "digest": call_digest("ev_stop", {"charger": "lp1"})}
    charge = stop | {"digest": call_digest("ev_charge_now", {"charger": "lp1", "power_w": 1})}
    first_stop = ids.cmd_id(rid=2, now_s=0.0, **stop)
    ids.cmd_id(rid=1, now_s=1.0, **charge)
    assert ids.cmd_id(rid=2, now_s=2.0, **stop) != first_stop
    assert ids.cmd_id(rid=2, now_s=3.0, **(stop | {"agent_key": b"j"})) not in (first_stop,)


async def test_a_retried_call_sends_one_cmd_id() -> None:
    homes = Homes()
    svc = service(homes, confirm_ttl_s=None)
    answers = []
    for _ in range(2):
        _, body = await post(svc, *call("ev_stop", {"charger": "lp1"}))
        answers.append(body["result"]["structuredContent"])
        assert answers[-1]["state"] == "applied"
    other, headers = call("ev_stop", {"charger": "lp1"})
    other["id"] = 2
    await post(svc, other, headers)
    # the retry is answered with the first attempt's answer, said to be one, not sent again
    assert answers[1]["cmdId"] == answers[0]["cmdId"] == homes.sent[0][2]
    assert answers[1]["repeated"] is True and "repeated" not in answers[0]
    assert len(homes.sent) == 2 and homes.sent[1][2] != homes.sent[0][2]


def test_request_state_is_bound_and_signed() -> None:
    states = ConfirmStates(ttl_s=60)
    sealed = states.seal(principal="h\x00k", digest="d", cmd_id="c", now_ms=0)
    assert states.open(sealed, principal="h\x00k", digest="d", now_ms=59_999).cmd_id == "c"
    head, sig = sealed.split(".")
    forged = base64.urlsafe_b64encode(
        json.dumps({"p": "h\x00k", "d": "d", "c": "other", "x": 10**15}).encode()
    ).decode()
    for bad in (forged.rstrip("=") + "." + sig, head + "." + sig[:-2] + "AA", "x", 7, "a.b"):
        with pytest.raises(StateRefused):
            states.open(bad, principal="h\x00k", digest="d", now_ms=0)
    with pytest.raises(StateRefused):
        states.open(sealed, principal="h\x00j", digest="d", now_ms=0)
    with pytest.raises(StateRefused):
        states.open(sealed, principal="h\x00k", digest="e", now_ms=0)
    with pytest.raises(StateExpired):
        states.open(sealed, principal="h\x00k", digest="d", now_ms=60_000)
    with pytest.raises(StateRefused):  # another process's key
        ConfirmStates(ttl_s=60).open(sealed, principal="h\x00k", digest="d", now_ms=0)


CHARGE = {"charger": "lp1", "power_w": 7400, "minutes": 15}


async def test_the_person_accepts_and_the_command_goes_once() -> None:
    homes = Homes()
    seen: list[str] = []

    async def accept(ctx: Any, params: Any) -> ElicitResult:
        seen.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async with client(service(homes), elicit=accept) as c:
        result = await c.call_tool("ev_charge_now", CHARGE)
    assert seen == [
        "Charge Garage charger at 7.4 kW for 15 minutes? It stops by itself after that."
    ]
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["state"] == "applied"
    assert result.structured_content["holdEndsAtMs"] == 5000
    assert homes.sent == [
        ("loadpoint.hold", {"id": "lp1", "power_w": 7400, "hold_s": 900}, homes.made[0])
    ]


@pytest.mark.parametrize("action", ["decline", "cancel", "accept-false"])
async def test_the_person_declines_and_nothing_is_sent(action: str) -> None:
    homes = Homes()

    async def no(ctx: Any, params: Any) -> ElicitResult:
        if action == "accept-false":
            return ElicitResult(action="accept", content={"confirm": False})
        return ElicitResult(action=action)  # type: ignore[arg-type]

    async with client(service(homes), elicit=no) as c:
        result = await c.call_tool("ev_charge_now", CHARGE)
    assert result.is_error and "did not confirm" in result.content[0].text  # type: ignore[union-attr]
    assert homes.sent == []


async def test_a_tampered_state_is_refused_and_nothing_is_sent() -> None:
    from mcp.shared.exceptions import MCPError

    homes = Homes()
    async with client(service(homes), elicit=lambda ctx, p: None) as c:
        first = await c.session.call_tool("ev_charge_now", CHARGE, allow_input_required=True)
        state = first.request_state  # type: ignore[union-attr]
        assert state is not None
        accept = {"confirm": ElicitResult(action="accept", content={"confirm": True})}
        for tampered in (state[:-3] + "AAA", "x" + state, state + "."):
            with pytest.raises(MCPError, match="requestState"):
                await c.session.call_tool(
                    "ev_charge_now",
                    CHARGE,
                    input_responses=accept,  # type: ignore[arg-type]
                    request_state=tampered,
                    allow_input_required=True,
                )
        with pytest.raises(MCPError, match="another call"):  # the state of other arguments
            await c.session.call_tool(
                "ev_charge_now",
                CHARGE | {"power_w": 11000},
                input_responses=accept,  # type: ignore[arg-type]
                request_state=state,
                allow_input_required=True,
            )
    assert homes.sent == []


async def test_an_expired_state_asks_again() -> None:
    homes = Homes()
    clock = Clock()
    asked: list[str] = []

    async def slow(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        if len(asked) == 1:
            clock.ms += 120_000  # the person took the whole two minutes
        return ElicitResult(action="accept", content={"confirm": True})

    async with client(service(homes, clock), elicit=slow) as c:
        result = await c.call_tool("ev_charge_now", CHARGE)
    assert asked[1].startswith("That confirmation ran out.") and len(asked) == 2
    assert not result.is_error and len(homes.sent) == 1


async def test_only_the_setting_off_relies_on_the_grant_alone() -> None:
    """Clients that cannot elicit get a preview first (tests/mcp/test_consent.py); with the
    setting off every client's charge goes on the owner's grant alone."""
    for mode, elicit, ttl in (
        ("2026-07-28", None, 120.0),
        ("legacy", lambda c, p: None, 120.0),
        ("2026-07-28", lambda c, p: None, None),
    ):
        homes = Homes()
        async with client(service(homes, confirm_ttl_s=ttl), mode=mode, elicit=elicit) as c:
            result = await c.call_tool("ev_charge_now", CHARGE)
        assert not result.is_error and len(homes.sent) == (ttl is None), mode


async def test_goals_and_requests() -> None:
    homes = Homes()
    async with client(service(homes)) as c:
        queued = await c.call_tool(
            "goal_request",
            {
                "goal": "ev_target",
                "car": "car1",
                "soc_permille": 800,
                "by_ms": 2_000_000,
                "note": "trip\u202e\u200b",  # hidden characters never reach the owner
            },
        )
        listed = await c.call_tool("requests_list", {})
    assert queued.structured_content is not None
    assert queued.structured_content["reqId"] == "req-1"
    assert queued.structured_content["decidedBy"] == "owner"
    assert listed.structured_content == {"requests": []}
    assert homes.asked[0] == (
        "goal.request",
        {
            "goal": "ev_target",
            "args": {"car": "car1", "soc_permille": 800, "byMs": 2_000_000},
            "note": "trip",
        },
    )


async def test_a_charger_the_home_does_not_list_is_not_asked_about() -> None:
    homes = Homes()
    with trio.fail_after(5):
        async with client(service(homes), elicit=lambda c, p: None) as c:
            result = await c.call_tool("ev_charge_now", CHARGE | {"charger": "lp9"})
    assert result.is_error and "no charger called 'lp9'" in result.content[0].text  # type: ignore[union-attr]


async def test_every_command_leaves_one_audit_line(caplog: pytest.LogCaptureFixture) -> None:
    homes = Homes()
    svc = service(homes, confirm_ttl_s=None)
    with caplog.at_level("INFO", logger="ftwbridge.audit"):
        await post(svc, *call("ev_charge_now", CHARGE))
        homes.refusal = Refusal("E_NEEDS_OWNER", {"op": "loadpoint.hold", "why": "held"})
        await post(svc, *call("ev_stop", {"charger": "lp1"}))
        await post(
            svc, *call("goal_request", {"goal": "site_mode", "mode": "idle", "note": "x\ny"})
        )
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cmd ")]
    assert lines == [  # the token's agent id tries a line break: it stays on one line
        "cmd op=loadpoint.hold charger=lp1 home=h1 agent=a 1 status=ok outcome=applied",
        "cmd op=loadpoint.hold charger=lp1 home=h1 agent=a 1 status=ok outcome=E_NEEDS_OWNER",
    ]


async def test_raw_confirmation_rounds_as_an_attacker_sends_them() -> None:
    """The retry's fields straight on the wire: junk `inputResponses` is -32602, an answer to
    no question of ours asks again, a `confirm` that is not `true` sends nothing."""
    homes = Homes()
    svc = service(homes)
    body, headers = call("ev_charge_now", CHARGE)
    body["params"]["_meta"] = {
        **body["params"]["_meta"],
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    }
    _, first = await post(svc, body, headers)
    state = first["result"]["requestState"]
    assert first["result"]["resultType"] == "input_required"
    cases: list[tuple[Any, str]] = [
        ("yes", "error"),
        ([{"action": "accept"}], "error"),
        ({"other": {"action": "accept"}}, "input_required"),
        ({"confirm": {"action": "maybe"}}, "input_required"),
        ({"confirm": {"action": "accept", "content": {"confirm": "true"}}}, "declined"),
        ({"confirm": {"action": "accept", "content": {}}}, "declined"),
    ]
    fresh = []
    for _ in cases:  # each answer to a question of its own
        _, asked = await post(svc, body | {"id": body["id"] + 100}, headers)
        fresh.append(asked["result"]["requestState"])
    for (responses, expect), state in zip(cases, fresh, strict=True):
        body["params"] |= {"requestState": state, "inputResponses": responses}
        body["id"] = body["id"] + 1
        status, out = await post(svc, body, headers)
        if expect == "error":
            assert status == 400 and out["error"]["code"] == -32602, responses
        elif expect == "input_required":
            assert out["result"]["resultType"] == "input_required", responses
        else:
            assert out["result"]["isError"] and "did not confirm" in str(out["result"]), responses
    yes = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    body["params"] |= {"requestState": 12, "inputResponses": yes}
    status, out = await post(svc, body, headers)
    assert status == 400 and "requestState" in out["error"]["message"]
    assert homes.sent == []
    body["params"] |= {"requestState": first["result"]["requestState"]}
    _, out = await post(svc, body, headers)
    assert out["result"]["structuredContent"]["state"] == "applied" and len(homes.sent) == 1


async def test_a_goal_by_a_time_already_past_is_audited_as_invalid_arguments(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the assistant reads (an isError result) and the audit line agree (README walk)."""
    homes = Homes()
    svc = service(homes, confirm_ttl_s=None)
    past = {"goal": "ev_target", "car": "car1", "soc_permille": 800, "by_ms": 1000}
    with caplog.at_level("INFO", logger="ftwbridge.audit"):
        _, body = await post(svc, *call("goal_request", past))
    assert body["result"]["isError"]
    assert "by_ms is in the past" in body["result"]["content"][0]["text"]
    said = [r.getMessage() for r in caplog.records if "goal_request" in r.getMessage()]
    assert said and all("status=invalid_arguments" in line for line in said), said
    assert homes.sent == []


async def test_a_command_refused_at_the_bridge_or_timed_out_is_audited_too(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    """Operators read the `cmd` lines for every command an assistant asked for, not only those
    that reached the box: a refusal before a byte leaves has its line, and so has a command
    whose answer did not come within the call deadline (it may have reached the box)."""

    class Slow(Homes):
        async def command(self, *args: Any, **kwargs: Any) -> CommandOutcome:
            await trio.sleep(3600)
            raise AssertionError("the deadline ends it first")

    no_ops = Homes(dataclasses.replace(GRANT, ops=()))
    short = Homes(dataclasses.replace(GRANT, caps={"hold_s": 600}))
    with caplog.at_level("INFO", logger="ftwbridge.audit"):
        await post(service(no_ops, confirm_ttl_s=None), *call("ev_stop", {"charger": "lp1"}))
        await post(service(short, confirm_ttl_s=None), *call("ev_charge_now", CHARGE))
        _, body = await post(
            service(Slow(), confirm_ttl_s=None), *call("ev_stop", {"charger": "lp1"})
        )
    assert body["result"]["isError"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cmd ")]
    assert [line.split()[-1] for line in lines] == [
        "outcome=E_OP_NOT_GRANTED",
        "outcome=E_CAP_EXCEEDED",
        "outcome=timeout",
    ]


async def test_a_token_counts_only_the_scopes_its_newest_roster_row_grants() -> None:
    """Only signed data decides: the owner's newer roster keeps the agent but no longer grants
    `ftw.dispatch.write`; the token, minted before with that scope in its record, is answered
    403 for a charge (a step-up the owner decides), and nothing is asked of the home."""
    narrowed = dataclasses.replace(GRANT, scopes=("ftw.assets.read", "ftw.goals.write"))
    homes = Homes(narrowed)
    status, body = await post(service(homes), *call("ev_charge_now", CHARGE))
    assert status == 403 and body["error"]["data"] == {"requiredScopes": ["ftw.dispatch.write"]}
    assert homes.sent == [] and homes.asked == []
    status, body = await post(service(homes), *call("requests_list", {}))
    assert status == 200 and not body["result"]["isError"]
