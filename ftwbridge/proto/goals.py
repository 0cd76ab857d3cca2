"""Goal requests of PROTOCOL.md part E, typed: the agent asks, the owner decides at home.

| message | direction | envelope | body |
|---|---|---|---|
| `goal.request` | bridge -> box | request id | `GoalRequest` `{goal, args, note?}` |
| `goal.queued` | box -> bridge | same id | `GoalQueued` `{reqId, expiresAtMs}` |
| `requests.get` | bridge -> box | request id | none |
| `requests` | box -> bridge | same id | `RequestList` `{requests: [GoalRecord, ...]}` |
| `agent.decided` | box -> bridge | no id: answers no call | `Decided` `{reqId, decision, atMs}` |

Goals' args (agents.yaml `goals`): `EvTarget {car, soc_permille: 1..1000, byMs}` and
`SiteMode {mode}` (a key of registry.yaml `modes`): `parse_goal_args`. Builders and parsers
work as in `proto/control.py`: `to_body()`, `parse(body)` raising `fields.BadBody`. Times are
ms since the Unix epoch (box wall clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .fields import MAX_NOTE, MAX_REQUESTS, BadBody, as_map, member, only, prefixed, text, uint
from .names import Goal, Mode


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
    a = as_map(args, "args")
    try:
        if goal is Goal.EV_TARGET:
            only(a, {"car", "soc_permille", "byMs"}, "args")
            return EvTarget(
                text(a, "car"), uint(a, "soc_permille", low=1, high=1000), uint(a, "byMs")
            )
        only(a, {"mode"}, "args")
        return SiteMode(member(Mode, a, "mode"))
    except BadBody as exc:
        raise prefixed(exc, "args") from None


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
        b = as_map(body, "b")
        goal = member(Goal, b, "goal")
        args = parse_goal_args(goal, b.get("args"))
        note = text(b, "note", most=MAX_NOTE) if b.get("note") is not None else None
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
        b = as_map(body, "b")
        return cls(text(b, "reqId"), uint(b, "expiresAtMs"))


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
        b = as_map(body, "requests[]")
        goal = member(Goal, b, "goal")
        args = parse_goal_args(goal, b.get("args"))
        note = text(b, "note", most=MAX_NOTE) if b.get("note") is not None else None
        decided = uint(b, "decidedAtMs") if b.get("decidedAtMs") is not None else None
        state = member(RequestState, b, "state")
        return cls(text(b, "reqId"), goal, args, state, uint(b, "atMs"), note, decided)


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
        rows = as_map(body, "b").get("requests")
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
        b = as_map(body, "b")
        return cls(text(b, "reqId"), member(Decision, b, "decision"), uint(b, "atMs"))
