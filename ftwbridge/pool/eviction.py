"""When the pool closes a session by its own choice: idle past `idle_close_s`, holding a
request its caller gave up and the box has not answered within `call_deadline_s`, or the
least recently used idle one when the pool is full (`warm_sessions`). A session a live feed
holds (`pool/feed.py`) is never closed for being idle. No I/O: closing a session only moves
its state (`pool/session.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ftwbridge.door import LocalEnd
from ftwbridge.proto.names import TunEndReason

from .session import PooledSession, State


def look(
    s: PooledSession,
    now: float,
    *,
    idle_close_s: float,
    call_deadline_s: float,
    referenced: Callable[[PooledSession], bool],
    schedule: Callable[[PooledSession, float], None],
) -> None:
    """The deadline heap's look at `s` at `now` (trio's clock, s): close it when idle past
    `idle_close_s` (unless a live feed holds it), or when its box has not answered, within
    `call_deadline_s`, a request whose caller gave up; else `schedule` the next look."""
    if s.state is State.READY:
        if s.has_expired(now) and referenced(s):  # a live feed holds it
            s.idle_at = now + idle_close_s
            schedule(s, s.idle_at)
        elif s.has_expired(now):
            s.close(TunEndReason.IDLE.value)
        else:
            schedule(s, s.idle_at)
    elif s.is_abandoned:
        due = s.sent_at + call_deadline_s
        if now >= due:
            s.close(LocalEnd.NO_ANSWER.value)
        else:
            schedule(s, due)


def evict_for_room(
    sessions: Iterable[PooledSession],
    count: Callable[[], int],
    most: int,
    referenced: Callable[[PooledSession], bool],
) -> None:
    """Close idle sessions, least recently used first (`sessions` in that order), until fewer
    than `most` are open (`count()`) or none is left to close: one that is held, waited for,
    or held by a live feed stays."""
    while count() >= most:
        for s in sessions:
            if s.is_available and not s.waiting and not referenced(s):
                s.close(TunEndReason.IDLE.value)
                break
        else:
            return
