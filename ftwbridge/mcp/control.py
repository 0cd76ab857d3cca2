"""Running the control tools (PROTOCOL.md part E): bridge-side checks, the person's
confirmation, the retry rule, and the results in words.

`Control.run(tool, args, token, route)` returns a tool result (a preview awaiting the
person's confirmation among them), or `InputRequired` when the person is asked by elicitation
(`mcp/consent.py`); it raises `Refusal` for what the box or the
bridge refuses (the server turns it into words) and `StateRefused` for a `requestState` that
is not ours (a JSON-RPC error). Every command leaves one audit line with the op, the charger and
the outcome (ids and registry words only, never a client's free text).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from ftwbridge.proto.clean import clean, to_json
from ftwbridge.proto.control import (
    CmdAck,
    CmdResult,
    CmdState,
    EvTarget,
    GoalQueued,
    GoalRequest,
    Hold,
    Release,
    RequestList,
    SiteMode,
)
from ftwbridge.proto.names import Cap, Code, Goal, GoalMsg, Mode, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from .cmdids import CommandIds, call_digest
from .confirm import InputRequired as InputRequired
from .consent import DECLINED as DECLINED
from .consent import ConfirmMode, Consent
from .control_tools import (
    CHARGE_NOW,
    GOAL,
    HOLD_OP,
    REQUESTS,
    STOP,
    ChargeNowArgs,
    ControlTool,
    EvTargetGoal,
    GoalArgs,
    StopArgs,
)
from .firsts import First, FirstAnswers
from .inbound import Route
from .results import log_safe, ok_result, refusal_result, text_error

audit = logging.getLogger("ftwbridge.audit")

OWNER_DECIDES = (
    "The home's owner decides at home; nothing changes until they approve. requests_list"
    " shows their decision."
)
SUPERSEDED = (
    "Another command for that charger replaced this one before it was carried out; nothing"
    " was done by it."
)
UNCONFIRMED = (
    "The home's box sent it to the charger but could not read back that it took effect;"
    " check chargers_list."
)
REPEATED = (
    "This call was made before: this is the answer of its first attempt (the command was"
    " carried out once, not again). observed is what the charger did at observedAtMs, not"
    " what it does now; chargers_list says what it does now."
)
REPEATED_REFUSAL = (
    "(This call was made before: this is the answer of its first attempt; nothing was sent again.)"
)
REPEATED_META = "ftwbridge/repeated"
"""`_meta` key of a repeated command's refusal: when its first attempt was sent and observed."""
REPEATED_UNTIMED = (
    "This call was made before (first sent at firstSentAtMs): the box answered with its first"
    " attempt's answer and did not act again. observed is the box's read-back from then, not"
    " what the charger does now; chargers_list says what it does now."
)


class ArgumentsRefused(ValueError):
    """A control tool's arguments that fit its schema but not the moment (a `by_ms` already
    past): the message is the words the assistant reads in an `isError` result, and the
    request's audit outcome is `invalid_arguments`, as for a schema failure."""


class Outcome(Protocol):
    """A command's outcome as the pool gives it (`pool.command.CommandOutcome`)."""

    @property
    def cmd_id(self) -> str: ...
    @property
    def ack(self) -> CmdAck | None: ...
    @property
    def result(self) -> CmdResult: ...


class ControlPort(Protocol):
    """What the control tools need of the pool and the rosters."""

    async def call(self, home: str, agent_key: bytes, read: str, body: Any) -> Reply:
        """One box request (a read or `goal.request`); raises `Refusal`."""

    async def grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        """The agent's row in the home's newest roster, or None."""

    async def command(
        self, home: str, agent_key: bytes, op: str, args: dict[str, Any], cmd_id: str
    ) -> Outcome:
        """One command (`Pool.command`); raises `Refusal`."""

    def new_cmd_id(self) -> str:
        """A new `cmdId` (UUIDv7 text)."""


class Control:
    """The control tools for one `/mcp` service.

    Args:
        homes: the port to the pool and the rosters.
        wall_ms: the bridge's wall clock, ms since the epoch.
        call_deadline_s: one tool call, end to end, seconds.
        confirm_ttl_s: how long the person has to confirm a charge, seconds; None turns
            confirmation off (clients then rely on the owner's grant alone).
        confirm_mode: the `confirm_commands` setting (`mcp/consent.py`): `elicit` asks by
            elicitation where the client declares it and by preview otherwise.
    """

    def __init__(
        self,
        *,
        homes: ControlPort,
        wall_ms: Callable[[], int],
        call_deadline_s: float,
        confirm_ttl_s: float | None,
        confirm_mode: ConfirmMode = "elicit",
    ) -> None:
        self._homes = homes
        self._wall_ms = wall_ms
        self._deadline_s = call_deadline_s
        self._ids = CommandIds(lambda: homes.new_cmd_id())
        self._firsts = FirstAnswers()
        self.consent = Consent(
            homes=homes,
            wall_ms=wall_ms,
            ttl_s=confirm_ttl_s or 120.0,
            mode="off" if confirm_ttl_s is None else confirm_mode,
        )

    async def run(
        self,
        tool: ControlTool,
        args: Any,
        token: TokenRecord,
        route: Route,
        *,
        ends: float | None = None,
    ) -> dict[str, Any] | InputRequired:
        """Run `tool` with its parsed `args` for `token`'s agent; `route` is the request
        (its id, era, params and client capabilities); `ends` is when its work is cut (trio
        time, `mcp/deadline.py`; default `call_deadline_s` from now).

        Raises:
            Refusal: the bridge or the box refused (words at the MCP edge).
            confirm.StateRefused: a `requestState` that is not ours for this call.
        """
        if ends is None:
            ends = trio.current_time() + self._deadline_s
        with trio.move_on_at(ends) as scope:
            if tool is CHARGE_NOW or tool is STOP:
                return await self._command(tool, args, token, route)
            if tool is GOAL:
                return await self._goal(args, token)
            assert tool is REQUESTS
            reply = await self._homes.call(token.home, token.agent_key, Read.REQUESTS_GET, None)
            listed = reply.body
            assert isinstance(listed, RequestList)
            return ok_result(to_json(listed.to_body()))
        assert scope.cancelled_caught
        if tool is CHARGE_NOW or tool is STOP:  # it may have reached the box: say so
            self._audit(token, args.charger, "timeout")
        raise Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})

    async def _grant(self, token: TokenRecord) -> AgentGrant:
        grant = await self._homes.grant(token.home, token.agent_key)
        if grant is None:
            raise Refusal(Code.E_GRANT_REVOKED)
        return grant

    async def _command(
        self, tool: ControlTool, args: Any, token: TokenRecord, route: Route
    ) -> dict[str, Any] | InputRequired:
        """Check, confirm and send one command; every way it ends leaves one audit line
        (`_audit`), a refusal at the bridge before anything is sent included."""
        try:
            ready = await self._prepare(tool, args, token, route)
        except Refusal as exc:
            self._audit(token, args.charger, exc.code)
            raise
        if not isinstance(ready, tuple):
            return ready  # the person is asked, or declined (audited as such)
        op_args, cmd_id = ready
        key = (token.home, token.agent_key, cmd_id)
        earlier = self._firsts.begin(key, now_ms=self._wall_ms())
        if earlier is not None and earlier.outcome is not None:  # nothing is sent again
            self._audit(token, args.charger, "repeat")
            return _first_answer(tool, args.charger, earlier.outcome, earlier)
        try:
            outcome = await self._homes.command(
                token.home, token.agent_key, HOLD_OP.value, op_args, cmd_id
            )
        except Refusal as exc:
            self._firsts.forget(key)
            self._audit(token, args.charger, exc.code)
            raise
        observed_ms = None if earlier is not None else self._wall_ms()
        self._firsts.done(key, outcome, observed_ms=observed_ms)
        if outcome.cmd_id != cmd_id:  # sent again under a new id after E_CONFLICT: the
            self._ids.replace(cmd_id, outcome.cmd_id)  # client's later retries go under it
            again = (*key[:2], outcome.cmd_id)
            self._firsts.begin(again, now_ms=self._wall_ms())
            self._firsts.done(again, outcome, observed_ms=observed_ms)
        self._audit(token, args.charger, outcome.result.state.value)
        if earlier is not None:
            return _first_answer(tool, args.charger, outcome, earlier)
        return _command_result(tool, args.charger, outcome, First(0, outcome, observed_ms))

    async def _prepare(
        self, tool: ControlTool, args: Any, token: TokenRecord, route: Route
    ) -> tuple[dict[str, Any], str] | dict[str, Any] | InputRequired:
        """The bridge's checks (grant, op, caps) and the person's confirmation: the op's
        arguments and the `cmdId` to send under, or what to answer instead (the question, or
        the declined result).

        Raises:
            Refusal: the grant, its ops or its caps do not allow the command; the charger is
                not one the home lists.
        """
        grant = await self._grant(token)
        if HOLD_OP.value not in grant.ops:  # refused here: no byte leaves for it
            raise Refusal(Code.E_OP_NOT_GRANTED, {"op": HOLD_OP.value})
        op_args: dict[str, Any]
        if isinstance(args, ChargeNowArgs):
            hold_s, top = args.minutes * 60, grant.cap(Cap.HOLD_S)
            if hold_s > top:
                raise Refusal(
                    Code.E_CAP_EXCEEDED, {"cap": Cap.HOLD_S.value, "max": top, "asked": hold_s}
                )
            op_args = Hold(args.charger, args.power_w, hold_s).to_args()
        else:
            assert isinstance(args, StopArgs)
            op_args = Release(args.charger).to_args()
        digest = call_digest(tool.name, args.model_dump(exclude={"confirmation"}))
        cmd_id: str | None = None
        way = self.consent.way(route) if tool is CHARGE_NOW else None
        if way is not None:
            asked = await self.consent.ask(way, args, token, route, digest)
            if not isinstance(asked, str):
                declined = isinstance(asked, dict) and asked.get("isError")
                self._audit(token, args.charger, "declined" if declined else "asked")
                return asked
            cmd_id = asked
            assert route.id is not None
            self._ids.note(  # the agent's latest call now: an older id is no retry of it
                home=token.home,
                agent_key=token.agent_key,
                rid=route.id,
                digest=digest,
                cmd_id=cmd_id,
                now_s=trio.current_time(),
            )
        if cmd_id is None:
            assert route.id is not None
            cmd_id = self._ids.cmd_id(
                home=token.home,
                agent_key=token.agent_key,
                rid=route.id,
                digest=digest,
                now_s=trio.current_time(),
            )
        return op_args, cmd_id

    async def _goal(self, args: GoalArgs, token: TokenRecord) -> dict[str, Any]:
        goal = args.root
        if isinstance(goal, EvTargetGoal):
            if goal.by_ms <= self._wall_ms():
                raise ArgumentsRefused(
                    "The arguments for goal_request are not valid: by_ms is in the past; give"
                    " when the car should be ready, in ms since the epoch."
                )
            target: EvTarget | SiteMode = EvTarget(goal.car, goal.soc_permille, goal.by_ms)
        else:
            target = SiteMode(Mode(goal.mode))
        note = clean(goal.note or "").strip() or None  # the owner reads it: no hidden characters
        body = GoalRequest(Goal(goal.goal), target, note).to_body()
        reply = await self._homes.call(token.home, token.agent_key, GoalMsg.GOAL_REQUEST, body)
        queued = reply.body
        assert isinstance(queued, GoalQueued)
        return ok_result(
            {
                "reqId": clean(queued.req_id),
                "expiresAtMs": queued.expires_at_ms,
                "decidedBy": "owner",
                "message": OWNER_DECIDES,
            }
        )

    def _audit(self, token: TokenRecord, charger: str, outcome: str) -> None:
        """One line per command asked for: op, charger (an id of `CHARGER_PATTERN`), outcome:
        the result's state, a refusal's code (the bridge's before sending, or the box's),
        `asked` and `declined` for the person's confirmation, `timeout` past the deadline."""
        audit.info(
            "cmd op=%s charger=%s home=%s agent=%s outcome=%s",
            HOLD_OP.value,
            charger,
            log_safe(token.home),
            log_safe(token.agent_id),
            outcome,
        )


def _first_answer(
    tool: ControlTool, charger: str, outcome: Outcome, first: First
) -> dict[str, Any]:
    """A repeated command's answer: the first attempt's result marked `repeated`, or its
    refusal (or `superseded`) in words that say it is the first attempt's (with `_meta`
    `ftwbridge/repeated` `{firstSentAtMs, observedAtMs?}`)."""
    try:
        result = _command_result(tool, charger, outcome, first, repeat=True)
    except Refusal as exc:
        result = refusal_result(exc)
    if not result.get("isError"):
        return result  # marked `repeated` in its structured content
    when = {"firstSentAtMs": first.sent_ms}
    if first.observed_ms is not None:
        when["observedAtMs"] = first.observed_ms
    result["content"][0]["text"] += " " + REPEATED_REFUSAL
    result.setdefault("_meta", {})[REPEATED_META] = when
    return result


def _command_result(
    tool: ControlTool, charger: str, outcome: Outcome, first: First, *, repeat: bool = False
) -> dict[str, Any]:
    """A command's tool result: `applied` and `unconfirmed` are results (with the read-back,
    when the bridge observed it, ms since the epoch, and when the hold ends); `rejected` and
    `expired` raise the box's refusal; `superseded` says so in words. A `repeat` (the same
    `cmdId` again) says it is the first attempt's answer (`repeated`, `firstSentAtMs`) and
    never presents its read-back as the charger's state now.

    Raises:
        Refusal: the box's error for a rejected command, `E_CMD_EXPIRED` for an expired one.
    """
    r = outcome.result
    if r.state is CmdState.REJECTED:
        if r.error is None:
            raise Refusal(Code.E_PRECONDITION)
        raise Refusal(r.error.code, dict(r.error.args))
    if r.state is CmdState.EXPIRED:
        raise Refusal(Code.E_CMD_EXPIRED)
    if r.state is CmdState.SUPERSEDED:
        return text_error(SUPERSEDED)
    value: dict[str, Any] = {"cmdId": outcome.cmd_id, "state": r.state.value, "charger": charger}
    observed = to_json(r.observed) if r.observed is not None else None
    if isinstance(observed, dict):
        value["observed"] = observed
    if tool is CHARGE_NOW:
        ends = outcome.ack.expires_at_ms if outcome.ack is not None else None
        until = observed.get("untilMs") if isinstance(observed, dict) else None
        if isinstance(until, int) and not isinstance(until, bool):
            ends = until
        if ends is not None:
            value["holdEndsAtMs"] = ends
    if first.observed_ms is not None:
        value["observedAtMs"] = first.observed_ms
    if repeat:
        value |= {"repeated": True, "firstSentAtMs": first.sent_ms}
        value["message"] = REPEATED if first.observed_ms is not None else REPEATED_UNTIMED
    elif r.state is CmdState.UNCONFIRMED:
        value["message"] = UNCONFIRMED
    elif tool is CHARGE_NOW:
        value["message"] = "Charging as asked; observed is what the charger does now."
    else:
        value["message"] = "This assistant's hold is ended; the charger follows its own plan."
    return ok_result(value)
