"""The control messages of PROTOCOL.md part E, typed: build them, and parse what a peer sent.

Sans-I/O and pure: no clock, no randomness of its own (`new_cmd_id` takes both as arguments).
Each message is a frozen dataclass with `to_body()` (the CBOR body, keys in contract order) and
a `parse(body)` classmethod that checks every field and raises `BadBody` naming the first field
that breaks the contract. Unknown keys of a body are ignored (part A); unknown keys inside a
command's or a goal's `args` are refused, because the box would act on them.

| message | direction | envelope | body |
|---|---|---|---|
| `cmd` | bridge -> box | lane 0, request id | `Cmd` `{cmdId, op, args, notValidAfterMs, expect: {rev}}` |
| `cmd.ack` | box -> bridge | same id; the call goes on | `CmdAck` `{cmdId, leaseId, expiresAtMs}` |
| `cmd.result` | box -> bridge | same id; ends the call | `CmdResult` `{cmdId, state, observed?, error?}` |
| `goal.request` | bridge -> box | request id | `GoalRequest` `{goal, args, note?}` |
| `goal.queued` | box -> bridge | same id | `GoalQueued` `{reqId, expiresAtMs}` |
| `requests.get` | bridge -> box | request id | none |
| `requests` | box -> bridge | same id | `RequestList` `{requests: [GoalRecord, ...]}` |
| `agent.decided` | box -> bridge | no id: answers no call | `Decided` `{reqId, decision, atMs}` |

`loadpoint.hold` is the one op agents command (agents.yaml `agent_ops`); its args are `Hold`
`{id, power_w, hold_s}` (a hold with no end, `hold_s` 0 or absent, parses with `hold_s=None`:
the box refuses it `E_NEEDS_OWNER {why: durable}`, it is not malformed) or `Release`
`{id, clear: true}`: `parse_hold_args`. Goals' args: `EvTarget {car, soc_permille, byMs}` and
`SiteMode {mode}` (agents.yaml `goals`): `parse_goal_args`.

The goal messages live in `proto/goals.py` and the field checks in `proto/fields.py`; this
module re-exports the goal names so one import serves the bridge's control tools.

Units: `*AtMs` and `byMs` are ms since the Unix epoch (box wall clock); `notValidAfterMs` is ms
of box uptime; `hold_s` seconds; `power_w` W; `soc_permille` permille.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from .fields import MAX_UINT, BadBody, as_map, cmd_id_field, member, only, prefixed, text, uint
from .goals import (
    Decided,
    Decision,
    EvTarget,
    GoalArgs,
    GoalQueued,
    GoalRecord,
    GoalRequest,
    RequestList,
    RequestState,
    SiteMode,
    parse_goal_args,
)
from .registry import peer_code

NOT_VALID_AFTER_SLACK_MS: Final = 20_000
"""What the bridge adds to its estimate of the box's uptime for `notValidAfterMs` (part E)."""


class CmdState(StrEnum):
    """`cmd.result.state` (PROTOCOL.md part E, upstream)."""

    APPLIED = "applied"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    UNCONFIRMED = "unconfirmed"


def new_cmd_id(now_ms: int, rand: bytes) -> str:
    """A `cmdId`: UUIDv7 text (RFC 9562 section 5.7) from wall-clock `now_ms` (ms since the
    epoch) and 10 random bytes `rand` (the caller draws them, e.g. `os.urandom(10)`).

    Raises:
        ValueError: `rand` is not 10 bytes, or `now_ms` does not fit 48 bits.
    """
    if len(rand) != 10 or not 0 <= now_ms < 2**48:
        raise ValueError("a UUIDv7 needs a 48-bit ms time and 10 random bytes")
    raw = bytearray(now_ms.to_bytes(6, "big") + rand)
    raw[6] = 0x70 | (raw[6] & 0x0F)
    raw[8] = 0x80 | (raw[8] & 0x3F)
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def not_valid_after_ms(box_uptime_ms: int, elapsed_ms: int) -> int:
    """`notValidAfterMs` (box uptime ms) as part E computes it: the uptime of the session's
    newest answer, plus the bridge's own time since that answer (ms), plus 20 s."""
    return box_uptime_ms + max(0, elapsed_ms) + NOT_VALID_AFTER_SLACK_MS


# -- commands ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cmd:
    """`cmd {cmdId, op, args, notValidAfterMs, expect: {rev}}` (part E; upstream shape).

    `op` stays text: an op this box does not know is the box's to refuse (`E_UNKNOWN_OP`).
    """

    cmd_id: str
    op: str
    args: dict[str, Any]
    not_valid_after_ms: int
    expect_rev: int

    def to_body(self) -> dict[str, Any]:
        """The body, keys in the contract's order."""
        return {
            "cmdId": self.cmd_id,
            "op": self.op,
            "args": dict(self.args),
            "notValidAfterMs": self.not_valid_after_ms,
            "expect": {"rev": self.expect_rev},
        }

    @classmethod
    def parse(cls, body: Any) -> Cmd:
        """Check a `cmd` body (at the box).

        Raises:
            BadBody: a missing or malformed field (`cmdId` first, so a box can look it up).
        """
        b = as_map(body, "b")
        cmd_id = cmd_id_field(b)
        op = text(b, "op")
        args = as_map(b.get("args"), "args")
        nva = uint(b, "notValidAfterMs")
        expect = as_map(b.get("expect"), "expect")
        return cls(cmd_id, op, args, nva, uint(expect, "rev"))


@dataclass(frozen=True, slots=True)
class Hold:
    """`loadpoint.hold` args `{id, power_w, hold_s}`: charger `id`, W >= 1, seconds >= 1; a
    `hold_s` of None is a hold with no end (the owner's, `E_NEEDS_OWNER {why: durable}`)."""

    id: str
    power_w: int
    hold_s: int | None

    def to_args(self) -> dict[str, Any]:
        """The `args` map."""
        out: dict[str, Any] = {"id": self.id, "power_w": self.power_w}
        if self.hold_s is not None:
            out["hold_s"] = self.hold_s
        return out


@dataclass(frozen=True, slots=True)
class Release:
    """`loadpoint.hold` args `{id, clear: true}`: end this agent's hold on charger `id`."""

    id: str

    def to_args(self) -> dict[str, Any]:
        """The `args` map."""
        return {"id": self.id, "clear": True}


def parse_hold_args(args: dict[str, Any]) -> Hold | Release:
    """Check `loadpoint.hold` args (agents.yaml `agent_ops`); unknown keys are refused.

    Raises:
        BadBody: named `args.<field>`.
    """
    try:
        if "clear" in args:
            only(args, {"id", "clear"}, "args")
            if args["clear"] is not True:
                raise BadBody("clear", "is not true")
            return Release(text(args, "id"))
        only(args, {"id", "power_w", "hold_s"}, "args")
        charger = text(args, "id")
        power = uint(args, "power_w", low=1, high=1_000_000)
        hold_s = uint(args, "hold_s") if args.get("hold_s") is not None else 0
    except BadBody as exc:
        raise prefixed(exc, "args") from None
    return Hold(charger, power, hold_s or None)


@dataclass(frozen=True, slots=True)
class CmdAck:
    """`cmd.ack {cmdId, leaseId, expiresAtMs}`: the box acted; the lease ends at `expiresAtMs`
    (wall clock). The command is still the session's request in flight."""

    cmd_id: str
    lease_id: str
    expires_at_ms: int

    def to_body(self) -> dict[str, Any]:
        """The body, keys in the contract's order."""
        return {"cmdId": self.cmd_id, "leaseId": self.lease_id, "expiresAtMs": self.expires_at_ms}

    @classmethod
    def parse(cls, body: Any) -> CmdAck:
        """Check a `cmd.ack` body (at the bridge).

        Raises:
            BadBody: a missing or malformed field.
        """
        b = as_map(body, "b")
        return cls(cmd_id_field(b), text(b, "leaseId"), uint(b, "expiresAtMs"))


@dataclass(frozen=True, slots=True)
class CmdError:
    """`cmd.result.error {code, args?}`: why a command was rejected (codes as `error`'s)."""

    code: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CmdResult:
    """`cmd.result {cmdId, state, observed?, error?}`; ends the command. `observed` is the
    box's read-back of what the device does (for a hold: `{power_w, untilMs | null}`), never
    the value asked."""

    cmd_id: str
    state: CmdState
    observed: dict[str, Any] | None = None
    error: CmdError | None = None

    def to_body(self) -> dict[str, Any]:
        """The body, keys in the contract's order."""
        out: dict[str, Any] = {"cmdId": self.cmd_id, "state": self.state.value}
        if self.observed is not None:
            out["observed"] = dict(self.observed)
        if self.error is not None:
            err: dict[str, Any] = {"code": self.error.code}
            if self.error.args:
                err["args"] = dict(self.error.args)
            out["error"] = err
        return out

    @classmethod
    def parse(cls, body: Any) -> CmdResult:
        """Check a `cmd.result` body (at the bridge).

        Raises:
            BadBody: a missing or malformed field.
        """
        b = as_map(body, "b")
        cmd_id, state = cmd_id_field(b), member(CmdState, b, "state")
        observed = as_map(b["observed"], "observed") if b.get("observed") is not None else None
        error = None
        if b.get("error") is not None:
            e = as_map(b["error"], "error")
            code = e.get("code")
            if not isinstance(code, str) or peer_code(code) != code:
                raise BadBody("error.code", "is not a registry code")
            args = as_map(e["args"], "error.args") if e.get("args") is not None else {}
            error = CmdError(code, args)
        return cls(cmd_id, state, observed, error)


__all__ = [
    "MAX_UINT",
    "NOT_VALID_AFTER_SLACK_MS",
    "BadBody",
    "Cmd",
    "CmdAck",
    "CmdError",
    "CmdResult",
    "CmdState",
    "Decided",
    "Decision",
    "EvTarget",
    "GoalArgs",
    "GoalQueued",
    "GoalRecord",
    "GoalRequest",
    "Hold",
    "Release",
    "RequestList",
    "RequestState",
    "SiteMode",
    "new_cmd_id",
    "not_valid_after_ms",
    "parse_goal_args",
    "parse_hold_args",
]
