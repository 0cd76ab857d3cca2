"""The stub box's commands from agents (PROTOCOL.md part E, on the upstream `cmd`).

`Commands.handle(key, grant, body, now_ms, uptime_ms)` returns the answers to one `cmd` as
[(type, body), ...]: `cmd.ack` then `cmd.result` when the box acted, or one `error`. The box
checks in part E's order:

1. idempotency: a `cmdId` this agent sent in the last 24 h gets the same answers again and
   acts no second time (a retryable refusal, `E_CONFLICT` or `E_RATE_LIMITED`, is not kept:
   the same `cmdId` may try again);
2. the body's shape (`E_UNKNOWN_OP {arg}`), then expiry: box uptime past `notValidAfterMs`
   (`E_CMD_EXPIRED`);
3. a known op (`E_UNKNOWN_OP {op}`): `loadpoint.hold` and `site.mode.set`;
4. a live grant (`E_GRANT_EXPIRED`, raised: the box then ends the session);
5. the op in the grant's `ops` (`E_OP_NOT_GRANTED {op}`), the op's scope (`registry.yaml`
   `ops`, `E_SCOPE_DENIED {needScope}`);
6. `expect.rev` against `controlRev` (`E_CONFLICT {rev}`, retryable);
7. the dispatch gate (`E_PRECONDITION {blockedBy}` while `dispatchBlockedBy` is not empty);
8. the agent's bounds (agents.yaml `agent_ops`, `durable_ops`): `E_NEEDS_OWNER {op, why:
   durable}` for `site.mode.set` and a hold with no end, `E_CAP_EXCEEDED {cap: hold_s}`,
   `E_NOT_FOUND {what: loadpoint, id}` for an unknown charger, `E_NEEDS_OWNER {op, why: held}`
   for a charger another party holds, `E_NOT_FOUND {what: hold, id}` for a release with no
   hold of this agent;
9. `cmds_per_hour` per agent over a rolling hour (`E_RATE_LIMITED {retryAfterMs}`); a release
   is never refused for the rate (an assistant can always stop what it started) and does not
   count;

then it acts, acks (`leaseId`, `expiresAtMs` = the hold's end, wall clock) and reads back:
`observed {power_w, untilMs}` is what the charger draws (`stubbox.charger.drawn_w`), never the
power asked; `state` is `applied`, or `unconfirmed` when the charger draws nothing (no car
plugged in). `cmd.result` also carries the new `controlRev`, so the session's next command
expects the right revision (docs/protocol.md).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Final

from ftwbridge.proto.control import (
    BadBody,
    Cmd,
    CmdAck,
    CmdResult,
    CmdState,
    Hold,
    parse_hold_args,
)
from ftwbridge.proto.fields import cmd_id_field
from ftwbridge.proto.names import Cap, Code, DurableOp, Op
from ftwbridge.proto.registry import OP_SCOPE, Msg, retryable
from ftwbridge.proto.roster import AgentGrant

from . import charger
from .home import Home
from .problem import Problem, error_body, take_slot

KEEP_MS: Final = 86_400_000
"""How long the idempotency table keeps a command's answers (24 h, part E)."""
MAX_KEPT: Final = 50_000
"""Most commands the table keeps (oldest dropped first): 16 agents at 120 an hour for 24 h."""
HOUR_MS: Final = 3_600_000
KNOWN_OPS: Final = frozenset({Op.LOADPOINT_HOLD.value, Op.SITE_MODE_SET.value})
"""The ops this box acts on; other registry ops are `E_UNKNOWN_OP` (registry.yaml `ops`)."""

Answers = list[tuple[str, Any]]


@dataclass(slots=True)
class CommandStats:
    """What the box counted: commands acted on, and answers given again from the table."""

    acted: int = 0
    replays: int = 0


class Commands:
    """Agents' commands at one home (module docstring); acts on `home.controls`."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._table: OrderedDict[tuple[bytes, str], tuple[int, Answers]] = OrderedDict()
        self._recent: dict[bytes, deque[int]] = {}
        self._leases = 0
        self.stats = CommandStats()

    def handle(
        self,
        key: bytes,
        grant: AgentGrant,
        body: Any,
        now_ms: int,
        uptime_ms: int,
        *,
        home_ms: int | None = None,
    ) -> Answers:
        """Answer one `cmd` from the agent with `key` (32 bytes) and `grant`; times are the
        box's wall clock and uptime (ms). `home_ms` is the time the simulated home runs at
        when the box answers as at a frozen time (`Box.frozen_ms`): holds start, end and are
        read back at it, while the grant, the table and `cmds_per_hour` go by `now_ms`.

        Raises:
            Problem: `E_GRANT_EXPIRED` (the box answers it and ends the session).
        """
        while self._table and next(iter(self._table.values()))[0] + KEEP_MS <= now_ms:
            self._table.popitem(last=False)
        try:
            cmd_id = cmd_id_field(body if isinstance(body, dict) else {})
        except BadBody as exc:
            return [_error(Problem(Code.E_UNKNOWN_OP, arg=exc.field))]
        seen = self._table.get((key, cmd_id))
        if seen is not None:
            self.stats.replays += 1
            return seen[1]
        try:
            home = now_ms if home_ms is None else home_ms
            answers = self._act(key, grant, body, now_ms, uptime_ms, home)
        except Problem as p:
            if p.code is Code.E_GRANT_EXPIRED:
                raise
            answers = [_error(p)]
            if retryable(p.code):
                return answers
        self._table[(key, cmd_id)] = (now_ms, answers)
        while len(self._table) > MAX_KEPT:
            self._table.popitem(last=False)
        return answers

    def _act(
        self, key: bytes, grant: AgentGrant, body: Any, now_ms: int, uptime_ms: int, home_ms: int
    ) -> Answers:
        try:
            cmd = Cmd.parse(body)
        except BadBody as exc:
            raise Problem(Code.E_UNKNOWN_OP, arg=exc.field) from None
        if uptime_ms > cmd.not_valid_after_ms:
            raise Problem(Code.E_CMD_EXPIRED, notValidAfterMs=cmd.not_valid_after_ms)
        if cmd.op not in KNOWN_OPS:
            raise Problem(Code.E_UNKNOWN_OP, op=cmd.op)
        if now_ms >= grant.expires_at_ms:
            raise Problem(Code.E_GRANT_EXPIRED, expiresAtMs=grant.expires_at_ms)
        if cmd.op not in grant.ops:
            raise Problem(Code.E_OP_NOT_GRANTED, op=cmd.op)
        need = OP_SCOPE[cmd.op]
        if need not in grant.scopes:
            raise Problem(Code.E_SCOPE_DENIED, needScope=need.value)
        controls = self.home.controls
        controls.hold(charger.LOADPOINT, home_ms)  # a hold that ran out moves the rev first
        if cmd.expect_rev != controls.rev:
            raise Problem(Code.E_CONFLICT, rev=controls.rev)
        if controls.blocked_by:
            raise Problem(Code.E_PRECONDITION, blockedBy=list(controls.blocked_by))
        if cmd.op in set(DurableOp):
            raise Problem(Code.E_NEEDS_OWNER, op=cmd.op, why="durable")
        return self._hold(key, grant, cmd, now_ms, home_ms)

    def _hold(self, key: bytes, grant: AgentGrant, cmd: Cmd, now_ms: int, home_ms: int) -> Answers:
        try:
            args = parse_hold_args(cmd.args)
        except BadBody as exc:
            raise Problem(Code.E_UNKNOWN_OP, arg=exc.field) from None
        controls, me = self.home.controls, key.hex()
        if args.id != charger.LOADPOINT:
            raise Problem(Code.E_NOT_FOUND, what="loadpoint", id=args.id)
        held = controls.hold(args.id, home_ms)
        if not isinstance(args, Hold):
            if held is None or held.by != me:
                raise Problem(Code.E_NOT_FOUND, what="hold", id=args.id)
            controls.release(args.id)
            return self._done(cmd, held.lease_id, home_ms, home_ms)
        if args.hold_s is None:
            raise Problem(Code.E_NEEDS_OWNER, op=cmd.op, why="durable")
        top = grant.cap(Cap.HOLD_S)
        if args.hold_s > top:
            raise Problem(Code.E_CAP_EXCEEDED, cap=Cap.HOLD_S.value, max=top, asked=args.hold_s)
        if held is not None and held.by != me:
            raise Problem(Code.E_NEEDS_OWNER, op=cmd.op, why="held")
        self._count(key, grant, now_ms)
        self._leases += 1
        lease = f"lease-{self._leases}"
        until = home_ms + args.hold_s * 1000
        controls.set_hold(args.id, charger.Hold(args.power_w, until, me, lease))
        return self._done(cmd, lease, until, home_ms)

    def _done(self, cmd: Cmd, lease: str, until_ms: int, now_ms: int) -> Answers:
        """Ack, read the charger back, and give the result."""
        self.stats.acted += 1
        ack = CmdAck(cmd.cmd_id, lease, until_ms)
        lp = self.home.loadpoints(now_ms)["loadpoints"][0]
        hold = lp["hold"]
        observed = {"power_w": lp["power_w"], "untilMs": None if hold is None else hold["untilMs"]}
        state = CmdState.APPLIED
        if cmd.args.get("clear") is not True and lp["power_w"] == 0:
            state = CmdState.UNCONFIRMED
        result = CmdResult(cmd.cmd_id, state, observed).to_body()
        result["controlRev"] = self.home.controls.rev
        return [(Msg.CMD_ACK, ack.to_body()), (Msg.CMD_RESULT, result)]

    def _count(self, key: bytes, grant: AgentGrant, now_ms: int) -> None:
        """`cmds_per_hour` (agents.yaml `caps`) over a rolling hour, per agent key."""
        recent = self._recent.setdefault(key, deque())
        take_slot(
            recent,
            now_ms,
            window_ms=HOUR_MS,
            most=grant.cap(Cap.CMDS_PER_HOUR),
            cap=Cap.CMDS_PER_HOUR.value,
        )


def _error(p: Problem) -> tuple[str, Any]:
    return (Msg.ERROR, error_body(p.code, p.args_, p.retry_after_ms))
