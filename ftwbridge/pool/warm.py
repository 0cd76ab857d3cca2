"""A warm session's record, the pool's refusal and statistics types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from ftwbridge.door import Tun
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import AgentSession, Reply


@dataclass(slots=True)
class PoolStats:
    """`Pool.statistics()`: warm and opening sessions, calls in flight and queued, and how many
    sessions ended, by reason."""

    sessions: int
    opening: int
    calls_in_flight: int
    queued: int
    drops: dict[str, int]


@dataclass(slots=True, eq=False)
class Waiter:
    """A call waiting for the answer to request `rid`: set `reply` or `refusal`, then `done`."""

    rid: int
    done: trio.Event = field(default_factory=trio.Event)
    reply: Reply | None = None
    refusal: Refusal | None = None


@dataclass(slots=True, eq=False)
class Warm:
    """One agent's session at one home, owned by its task in the pool's nursery."""

    home: str
    agent_key: bytes
    grant: AgentGrant | None = None
    agent: AgentSession | None = None
    tun: Tun | None = None
    ready: trio.Event = field(default_factory=trio.Event)
    failure: Refusal | None = None
    lock: trio.Lock = field(default_factory=trio.Lock)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    idle: trio.CancelScope = field(default_factory=trio.CancelScope)
    waiter: Waiter | None = None
    end_reason: str | None = None
    hello_ok: dict[str, Any] = field(default_factory=dict)

    def close(self, reason: str) -> None:
        """End the session with `reason` (its task's finally releases everything)."""
        if self.end_reason is None:
            self.end_reason = reason
        self.scope.cancel()


HELLO_BODY = {
    "proto": {"min": 1, "max": 1},
    "app": {"build": "ftwbridge", "ua": "agent"},
    "locales": ["en"],
}


class PoolObserver(Protocol):
    """Where the pool reports timings (the bridge's metrics fit)."""

    def on_queue_wait(self, seconds: float) -> None: ...
    def on_open(self, outcome: str, seconds: float) -> None: ...


def refusal_for_end(reason: str) -> Refusal:
    """The refusal a waiting call gets when its session ends with `reason`."""
    if reason == TunEndReason.REVOKED:
        return Refusal(Code.E_GRANT_REVOKED)
    if reason == TunEndReason.EXPIRED:
        return Refusal(Code.E_GRANT_EXPIRED)
    return Refusal(Code.E_UNAVAILABLE, {"reason": reason})
