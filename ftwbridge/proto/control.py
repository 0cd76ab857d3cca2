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

Units: `*AtMs` and `byMs` are ms since the Unix epoch (box wall clock); `notValidAfterMs` is ms
of box uptime; `hold_s` seconds; `power_w` W; `soc_permille` permille.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar

from .errors import RemoteProtocolError
from .names import Goal, Mode

MAX_TEXT: Final = 64
"""Longest id a control message carries (charger, car, lease, request ids), in characters."""
MAX_NOTE: Final = 280
"""Longest `note` of a goal request, in characters."""
MAX_UINT: Final = 2**63 - 1
MAX_REQUESTS: Final = 256
"""Most goal records one `requests` answer may carry."""
NOT_VALID_AFTER_SLACK_MS: Final = 20_000
"""What the bridge adds to its estimate of the box's uptime for `notValidAfterMs` (part E)."""
_UUID7: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


class BadBody(RemoteProtocolError):
    """A control message's body breaks part E's shape; `field` names the first bad field
    (`"b"` for the body itself). A box answers it `E_UNKNOWN_OP {arg: field}` (as it does any
    bad read argument); the bridge ends the call with `E_BAD_BODY`."""

    def __init__(self, field_: str, why: str) -> None:
        super().__init__(f"{field_}: {why}")
        self.field = field_


class CmdState(StrEnum):
    """`cmd.result.state` (PROTOCOL.md part E, upstream)."""

    APPLIED = "applied"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    UNCONFIRMED = "unconfirmed"


class Decision(StrEnum):
    """`agent.decided.decision` (agents.yaml `goal_messages`)."""

    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class RequestState(StrEnum):
    """A goal request's `state` in `requests` (agents.yaml `answers.requests`)."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


# -- field checks -----------------------------------------------------------------------------


def _map(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BadBody(name, "is not a map with text keys")
    return value


def _uint(body: dict[str, Any], key: str, *, low: int = 0, high: int = MAX_UINT) -> int:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadBody(key, "is not an integer")
    if not low <= v <= high:
        raise BadBody(key, f"is outside {low}..{high}")
    return v


def _text(body: dict[str, Any], key: str, *, most: int = MAX_TEXT) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v:
        raise BadBody(key, "is not a non-empty text")
    if len(v) > most:
        raise BadBody(key, f"is longer than {most} characters")
    return v


def _only(args: dict[str, Any], keys: set[str], name: str) -> None:
    extra = sorted(set(args) - keys)
    if extra:
        raise BadBody(f"{name}.{extra[0]}", "is not a field of this shape")


def _cmd_id(body: dict[str, Any]) -> str:
    v = body.get("cmdId")
    if not isinstance(v, str) or not _UUID7.fullmatch(v):
        raise BadBody("cmdId", "is not a UUIDv7 in lower-case text")
    return v


E = TypeVar("E", bound=StrEnum)


def _enum(cls: type[E], body: dict[str, Any], key: str) -> E:
    v = body.get(key)
    for member in cls:
        if v == member.value:
            return member
    raise BadBody(key, f"is not one of {', '.join(cls)}")


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
        b = _map(body, "b")
        cmd_id = _cmd_id(b)
        op = _text(b, "op")
        args = _map(b.get("args"), "args")
        nva = _uint(b, "notValidAfterMs")
        expect = _map(b.get("expect"), "expect")
        return cls(cmd_id, op, args, nva, _uint(expect, "rev"))


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
            _only(args, {"id", "clear"}, "args")
            if args["clear"] is not True:
                raise BadBody("clear", "is not true")
            return Release(_text(args, "id"))
        _only(args, {"id", "power_w", "hold_s"}, "args")
        charger = _text(args, "id")
        power = _uint(args, "power_w", low=1, high=1_000_000)
        hold_s = _uint(args, "hold_s") if args.get("hold_s") is not None else 0
    except BadBody as exc:
        if exc.field.startswith("args."):
            raise
        raise BadBody(f"args.{exc.field}", str(exc).split(": ", 1)[-1]) from None
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
        b = _map(body, "b")
        return cls(_cmd_id(b), _text(b, "leaseId"), _uint(b, "expiresAtMs"))


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
        b = _map(body, "b")
        cmd_id, state = _cmd_id(b), _enum(CmdState, b, "state")
        observed = _map(b["observed"], "observed") if b.get("observed") is not None else None
        error = None
        if b.get("error") is not None:
            e = _map(b["error"], "error")
            code = e.get("code")
            if not isinstance(code, str) or not re.fullmatch(r"E_[A-Z0-9_]{1,48}", code):
                raise BadBody("error.code", "is not a registry code")
            args = _map(e["args"], "error.args") if e.get("args") is not None else {}
            error = CmdError(code, args)
        return cls(cmd_id, state, observed, error)


# -- goals ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvTarget:
    """Goal `ev_target {car, soc_permille: 1..1000, byMs}` (agents.yaml `goals`)."""

    car: str
    soc_permille: int
    by_ms: int

    def to_args(self) -> dict[str, Any]:
        """The `args` map."""
        return {"car": self.car, "soc_permille": self.soc_permille, "byMs": self.by_ms}


@dataclass(frozen=True, slots=True)
class SiteMode:
    """Goal `site_mode {mode}`: a key of registry.yaml `modes` (agents.yaml `goals`)."""

    mode: Mode

    def to_args(self) -> dict[str, Any]:
        """The `args` map."""
        return {"mode": self.mode.value}


GoalArgs = EvTarget | SiteMode


def parse_goal_args(goal: Goal, args: Any) -> GoalArgs:
    """Check a goal's `args` for `goal`; unknown keys are refused.

    Raises:
        BadBody: named `args.<field>`.
    """
    a = _map(args, "args")
    try:
        if goal is Goal.EV_TARGET:
            _only(a, {"car", "soc_permille", "byMs"}, "args")
            return EvTarget(
                _text(a, "car"), _uint(a, "soc_permille", low=1, high=1000), _uint(a, "byMs")
            )
        _only(a, {"mode"}, "args")
        return SiteMode(_enum(Mode, a, "mode"))
    except BadBody as exc:
        if exc.field.startswith("args."):
            raise
        raise BadBody(f"args.{exc.field}", str(exc).split(": ", 1)[-1]) from None


@dataclass(frozen=True, slots=True)
class GoalRequest:
    """`goal.request {goal, args, note?}` (scope `ftw.goals.write`); `note` is the agent's own
    text for the owner, at most `MAX_NOTE` characters."""

    goal: Goal
    args: GoalArgs
    note: str | None = None

    def to_body(self) -> dict[str, Any]:
        """The body, keys in the contract's order."""
        out: dict[str, Any] = {"goal": self.goal.value, "args": self.args.to_args()}
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def parse(cls, body: Any) -> GoalRequest:
        """Check a `goal.request` body (at the box).

        Raises:
            BadBody: a missing or malformed field, or an unknown goal (`goal`).
        """
        b = _map(body, "b")
        goal = _enum(Goal, b, "goal")
        args = parse_goal_args(goal, b.get("args"))
        note = _text(b, "note", most=MAX_NOTE) if b.get("note") is not None else None
        return cls(goal, args, note)


@dataclass(frozen=True, slots=True)
class GoalQueued:
    """`goal.queued {reqId, expiresAtMs}`: the request waits for the owner until then."""

    req_id: str
    expires_at_ms: int

    def to_body(self) -> dict[str, Any]:
        """The body, keys in the contract's order."""
        return {"reqId": self.req_id, "expiresAtMs": self.expires_at_ms}

    @classmethod
    def parse(cls, body: Any) -> GoalQueued:
        """Check a `goal.queued` body (at the bridge).

        Raises:
            BadBody: a missing or malformed field.
        """
        b = _map(body, "b")
        return cls(_text(b, "reqId"), _uint(b, "expiresAtMs"))


@dataclass(frozen=True, slots=True)
class GoalRecord:
    """One entry of `requests`: `{reqId, goal, args, note?, state, atMs, decidedAtMs?}`; `atMs`
    is when it was asked, `decidedAtMs` when the owner decided or it expired."""

    req_id: str
    goal: Goal
    args: GoalArgs
    state: RequestState
    at_ms: int
    note: str | None = None
    decided_at_ms: int | None = None

    def to_body(self) -> dict[str, Any]:
        """The entry's map, keys in the contract's order."""
        out: dict[str, Any] = {"reqId": self.req_id, "goal": self.goal.value}
        out["args"] = self.args.to_args()
        if self.note is not None:
            out["note"] = self.note
        out |= {"state": self.state.value, "atMs": self.at_ms}
        if self.decided_at_ms is not None:
            out["decidedAtMs"] = self.decided_at_ms
        return out

    @classmethod
    def parse(cls, body: Any) -> GoalRecord:
        """Check one entry (at the bridge, or a stub reading its state file back).

        Raises:
            BadBody: a missing or malformed field.
        """
        b = _map(body, "requests[]")
        goal = _enum(Goal, b, "goal")
        args = parse_goal_args(goal, b.get("args"))
        note = _text(b, "note", most=MAX_NOTE) if b.get("note") is not None else None
        decided = _uint(b, "decidedAtMs") if b.get("decidedAtMs") is not None else None
        state = _enum(RequestState, b, "state")
        return cls(_text(b, "reqId"), goal, args, state, _uint(b, "atMs"), note, decided)


@dataclass(frozen=True, slots=True)
class RequestList:
    """`requests {requests: [GoalRecord, ...]}`: this agent's goal requests of the last 30 days."""

    requests: tuple[GoalRecord, ...]

    def to_body(self) -> dict[str, Any]:
        """The body."""
        return {"requests": [r.to_body() for r in self.requests]}

    @classmethod
    def parse(cls, body: Any) -> RequestList:
        """Check a `requests` body (at the bridge).

        Raises:
            BadBody: a missing or malformed field, or more than `MAX_REQUESTS` entries.
        """
        rows = _map(body, "b").get("requests")
        if not isinstance(rows, list):
            raise BadBody("requests", "is not a list")
        if len(rows) > MAX_REQUESTS:
            raise BadBody("requests", f"has more than {MAX_REQUESTS} entries")
        return cls(tuple(GoalRecord.parse(r) for r in rows))


@dataclass(frozen=True, slots=True)
class Decided:
    """The pushed `agent.decided {reqId, decision, atMs}` (no id: it answers no call)."""

    req_id: str
    decision: Decision
    at_ms: int

    def to_body(self) -> dict[str, Any]:
        """The body, keys in the contract's order."""
        return {"reqId": self.req_id, "decision": self.decision.value, "atMs": self.at_ms}

    @classmethod
    def parse(cls, body: Any) -> Decided:
        """Check an `agent.decided` body (at the bridge).

        Raises:
            BadBody: a missing or malformed field.
        """
        b = _map(body, "b")
        return cls(_text(b, "reqId"), _enum(Decision, b, "decision"), _uint(b, "atMs"))
