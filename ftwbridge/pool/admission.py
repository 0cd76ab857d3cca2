"""Admission and the queue's refusals: the checks a call passes before it takes a session.

An agent is admitted against the home's newest roster by the bridge's own wall clock, once
per call (PROTOCOL.md part C, rosters); a call refused for a full queue is told how long to
wait (`retry_hint_ms`). No I/O but the roster's look-up.
"""

from __future__ import annotations

import math

from ftwbridge.door import Rosters
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant, Roster, admit

from .homes import HomeShare
from .session import PooledSession


async def admit_agent(
    rosters: Rosters,
    warm: PooledSession | None,
    home: str,
    agent_key: bytes,
    now_ms: int,
) -> tuple[Roster, AgentGrant]:
    """(the home's newest roster, the agent's grant in it) at `now_ms` (ms since the epoch).
    A refused agent's `warm` session, if any, is closed `expired` or `revoked`.

    Raises:
        Refusal: `E_UNAVAILABLE {subsystem: home}` without a roster, or admission's refusal
            (`proto.roster.admit`).
    """
    roster = await rosters.roster(home)
    if roster is None:
        raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "home"})
    decision = admit(roster, agent_key, now_ms)
    if isinstance(decision, Refusal):
        if warm is not None:
            warm.close(
                TunEndReason.EXPIRED.value
                if decision.code is Code.E_GRANT_EXPIRED
                else TunEndReason.REVOKED.value
            )
        raise decision
    return roster, decision.grant


def retry_hint_ms(
    share: HomeShare | None,
    now: float,
    *,
    pacing_wait_s: float,
    pace_calls_per_s: float,
    call_deadline_s: float,
) -> int:
    """What a call refused for a full queue at a home should wait (ms): the longest of its
    pacing wait, one pacing interval, the box's recent answer time, and how long the oldest
    request now at the box has waited (a stalled box shows there), at most the call deadline.
    `now` is trio's clock (s)."""
    oldest = 0.0
    answer_s = 0.0
    if share is not None:
        answer_s = share.answer_s
        oldest = max((now - s.sent_at for s in share.sessions.values() if s.at_box), default=0.0)
    wait = max(pacing_wait_s, 1 / pace_calls_per_s, answer_s, oldest)
    return math.ceil(1000 * min(wait, call_deadline_s))


def full_queue(retry_ms: int) -> Refusal:
    """The refusal for a call that finds its home's queue full (`queue_per_home`)."""
    return Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
