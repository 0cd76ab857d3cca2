"""A warm session's record and what acts on it alone: the messages its box sends, the refusal
a waiting call gets when it ends; the pool's statistics types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from ftwbridge.door import LocalEnd, Tun, TunEnded
from ftwbridge.proto.errors import ProtocolError
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import peer_reason
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import AgentSession, Push, Reply, Terminated


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


def check_clock(hello_ok: dict[str, Any], now_ms: int, max_skew_ms: int) -> None:
    """Check the box's clock in `hello_ok` against ours (PROTOCOL.md part B: a box without a
    clock cannot judge expiry).

    Raises:
        Refusal: `E_UNAVAILABLE {subsystem: clock}` without a clock, `E_CLOCK_SKEW {skewMs,
            maxMs}` past `max_skew_ms`.
    """
    clock = hello_ok.get("clock")
    box_ms = clock.get("nowMs") if isinstance(clock, dict) else None
    if (
        isinstance(box_ms, bool)
        or not isinstance(box_ms, int)
        or (isinstance(clock, dict) and clock.get("source") == "none")
    ):
        raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "clock"})
    skew = abs(box_ms - now_ms)
    if skew > max_skew_ms:
        raise Refusal(Code.E_CLOCK_SKEW, {"skewMs": skew, "maxMs": max_skew_ms})


def closed_idle(w: Warm) -> bool:
    """Whether `w` is closing or closed for idleness (its deadline passed, perhaps this very
    moment): a close the caller did not ask for, so the call takes a new session."""
    return w.idle.cancel_called or w.end_reason == TunEndReason.IDLE.value


async def deliver(w: Warm, message: bytes) -> None:
    """One Noise message from the box on a ready session, handled in the uplink reader's
    task: the answer goes to the waiting call directly. A message that fails the session
    (authentication, replay) or a `session.terminate` ends the session."""
    if w.agent is None or w.tun is None or w.end_reason is not None:
        return
    try:
        events = w.agent.receive(message)
    except ProtocolError:
        w.close(LocalEnd.PROTOCOL_ERROR.value)
        return
    for out in w.agent.data_to_send():
        try:
            await w.tun.send(out)
        except TunEnded:
            return
    for ev in events:
        waiter = w.waiter
        if isinstance(ev, Terminated):
            w.close(peer_reason(ev.reason))
            return
        if waiter is None or isinstance(ev, Push) or ev.id != waiter.rid:
            continue
        if isinstance(ev, Reply):
            waiter.reply = ev
        else:
            waiter.refusal = ev.refusal
        waiter.done.set()
