"""The stub box's goal requests (PROTOCOL.md part E): agents ask, the owner decides at home.

Pure: every method takes the wall clock `now_ms` (ms since the Unix epoch). A request waits
for the owner at most `WAIT_MS` (24 h), then expires; every request is kept `KEEP_MS` (30 days)
after it was asked, for `requests.get`. An agent has at most `pending_requests` (its grant's
cap, agents.yaml `caps`) waiting at once. Request ids are `goal-<n>`, counted on from the
highest kept one, so ids stay unique across a restart that kept the book (stubbox/state.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from ftwbridge.proto.control import (
    BadBody,
    Decided,
    Decision,
    EvTarget,
    GoalQueued,
    GoalRecord,
    GoalRequest,
    RequestList,
    RequestState,
)
from ftwbridge.proto.envelope import dumps
from ftwbridge.proto.fields import MAX_REQUESTS
from ftwbridge.proto.names import Cap, Code
from ftwbridge.proto.roster import AgentGrant

from .charger import CARS
from .problem import Problem

WAIT_MS: Final = 86_400_000
"""How long a goal request waits for the owner before it expires (24 h, part E)."""
KEEP_MS: Final = 30 * 86_400_000
"""How long a goal request is kept for `requests.get` (30 days, part E)."""
MAX_KEPT: Final = 10_000
"""Most requests the book keeps (oldest dropped first): a bound on the box's memory."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One goal request in the book: its record, the asking agent's key (32 bytes) and grant
    id, and when it stops waiting (wall ms)."""

    record: GoalRecord
    key: bytes
    agent: str
    expires_at_ms: int

    def to_row(self) -> dict[str, Any]:
        """The entry as a JSON-safe state-file row (`key` in hex)."""
        return self.record.to_body() | {
            "key": self.key.hex(),
            "agent": self.agent,
            "expiresAtMs": self.expires_at_ms,
        }

    @classmethod
    def from_row(cls, row: Any) -> Entry:
        """Read back a state-file row.

        Raises:
            ValueError: the row is not one `to_row` wrote.
        """
        if not isinstance(row, dict):
            raise ValueError("a goal request is not an object")
        try:
            record = GoalRecord.parse(row)
        except BadBody as exc:
            raise ValueError(f"a goal request's {exc.field} is not usable") from None
        key, agent, until = row.get("key"), row.get("agent"), row.get("expiresAtMs")
        if not isinstance(key, str) or not isinstance(agent, str) or not isinstance(until, int):
            raise ValueError("a goal request lacks its key, agent or expiresAtMs")
        raw = bytes.fromhex(key)
        if len(raw) != 32:
            raise ValueError("a goal request's key is not 32 bytes")
        return cls(record, raw, agent, until)


class GoalBook:
    """Every goal request of the last 30 days, oldest first (module docstring)."""

    def __init__(self, entries: list[Entry] | None = None) -> None:
        self._entries: dict[str, Entry] = {e.record.req_id: e for e in entries or ()}
        ids = [int(r[5:]) for r in self._entries if r.startswith("goal-") and r[5:].isdigit()]
        self._next = max(ids, default=0) + 1
        self.version = 0
        """Moves with every change (a request queued, decided, expired or forgotten)."""
        self._expired: list[Entry] = []

    def entries(self) -> list[Entry]:
        """Every kept request, oldest first."""
        return list(self._entries.values())

    def ask(self, key: bytes, grant: AgentGrant, body: Any, now_ms: int) -> GoalQueued:
        """Queue `goal.request` `body` from the agent with `key` and `grant`.

        Raises:
            Problem: `E_UNKNOWN_OP {arg}` for a malformed field, `E_NOT_FOUND {what: car, id}`
                for a car the home does not have, `E_CAP_EXCEEDED {cap: pending_requests}`
                when the agent already has its cap of requests waiting.
        """
        try:
            asked = GoalRequest.parse(body)
        except BadBody as exc:
            raise Problem(Code.E_UNKNOWN_OP, arg=exc.field) from None
        if isinstance(asked.args, EvTarget):
            if asked.args.car not in CARS:
                raise Problem(Code.E_NOT_FOUND, what="car", id=asked.args.car)
            if asked.args.by_ms <= now_ms:
                raise Problem(Code.E_UNKNOWN_OP, arg="args.byMs")
        self.expire(now_ms)
        top = grant.cap(Cap.PENDING_REQUESTS)
        waiting = sum(
            e.key == key and e.record.state is RequestState.PENDING for e in self._entries.values()
        )
        if waiting >= top:
            raise Problem(
                Code.E_CAP_EXCEEDED, cap=Cap.PENDING_REQUESTS.value, max=top, asked=waiting + 1
            )
        req_id = f"goal-{self._next}"
        self._next += 1
        record = GoalRecord(
            req_id, asked.goal, asked.args, RequestState.PENDING, now_ms, asked.note
        )
        self._entries[req_id] = Entry(record, key, grant.id, now_ms + WAIT_MS)
        self.version += 1
        while len(self._entries) > MAX_KEPT:
            del self._entries[next(iter(self._entries))]
        return GoalQueued(req_id, now_ms + WAIT_MS)

    def for_agent(self, key: bytes, now_ms: int, *, max_bytes: int | None = None) -> RequestList:
        """The `requests` answer for the agent with `key`: its requests, newest first, at most
        `MAX_REQUESTS`, and with `max_bytes`, only as many as fit that many bytes of CBOR (the
        contract's answer has no paging; the oldest are left out)."""
        self.expire(now_ms)
        mine = [e.record for e in reversed(self._entries.values()) if e.key == key]
        out: list[GoalRecord] = []
        size = 16  # the map and its one key
        for record in mine[:MAX_REQUESTS]:
            size += len(dumps(record.to_body()))
            if max_bytes is not None and size > max_bytes:
                break
            out.append(record)
        return RequestList(tuple(out))

    def waiting(self, now_ms: int) -> list[Entry]:
        """Requests waiting for the owner, oldest first."""
        self.expire(now_ms)
        return [e for e in self._entries.values() if e.record.state is RequestState.PENDING]

    def decide(self, req_id: str, approve: bool, now_ms: int) -> Entry:
        """The owner approves or denies request `req_id`; returns the decided entry.

        Raises:
            KeyError: no such request (one sentence).
            ValueError: the request is no longer waiting (decided or expired).
        """
        self.expire(now_ms)
        entry = self._entries.get(req_id)
        if entry is None:
            raise KeyError(f"no goal request {req_id!r} at this home")
        if entry.record.state is not RequestState.PENDING:
            raise ValueError(f"goal request {req_id!r} is {entry.record.state.value} already")
        state = RequestState.APPROVED if approve else RequestState.DENIED
        return self._settle(entry, state, now_ms)

    def expire(self, now_ms: int) -> None:
        """Expire requests that waited 24 h (each is kept for `take_expired`, whose agent
        hears `agent.decided {decision: expired}`), forget those asked over 30 days ago."""
        for entry in list(self._entries.values()):
            if entry.record.at_ms + KEEP_MS <= now_ms:
                del self._entries[entry.record.req_id]
                self.version += 1
            elif entry.record.state is RequestState.PENDING and entry.expires_at_ms <= now_ms:
                self._expired.append(self._settle(entry, RequestState.EXPIRED, entry.expires_at_ms))

    def next_expiry_ms(self) -> int | None:
        """When the earliest waiting request runs out (its `expiresAtMs`, the box's wall
        clock, ms since the epoch), or None when none waits."""
        return min(
            (
                e.expires_at_ms
                for e in self._entries.values()
                if e.record.state is RequestState.PENDING
            ),
            default=None,
        )

    def take_expired(self) -> list[Entry]:
        """The requests that expired since the last call (whichever call noticed it)."""
        out, self._expired = self._expired, []
        return out

    def _settle(self, entry: Entry, state: RequestState, at_ms: int) -> Entry:
        record = replace(entry.record, state=state, decided_at_ms=at_ms)
        settled = replace(entry, record=record)
        self._entries[record.req_id] = settled
        self.version += 1
        return settled


def decided(entry: Entry) -> Decided:
    """The `agent.decided` push for a settled entry."""
    r = entry.record
    assert r.decided_at_ms is not None
    return Decided(r.req_id, Decision(r.state.value), r.decided_at_ms)
