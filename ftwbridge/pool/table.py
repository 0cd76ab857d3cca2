"""The pool's session table: every open and opening session by (home, agent key), least
recently used first, each home's share (its sessions and its queue, `homes.HomeShare`), and
how many sessions ended, by reason. No I/O and no awaits: `Pool` decides with it, then does the
I/O (docs/architecture.md, "A pooled session's states")."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ftwbridge.proto.names import Cap, Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import Roster

from .eviction import evict_for_room
from .homes import HomeShare, PoolStats
from .session import PooledSession, State


class SessionTable:
    """The sessions and the homes' shares of one pool.

    Attributes:
        sessions: open and opening sessions by (home, agent key), least recently used first.
        homes: each home's share, kept while it has a session or a caller waiting.
        drops: how many sessions ended, by end reason.
    """

    def __init__(self) -> None:
        self.sessions: OrderedDict[tuple[str, bytes], PooledSession] = OrderedDict()
        self.homes: dict[str, HomeShare] = {}
        self.drops: dict[str, int] = {}

    def share(self, home: str) -> HomeShare:
        """`home`'s share, made when it has none."""
        h = self.homes.get(home)
        if h is None:
            h = self.homes[home] = HomeShare()
        return h

    def forget_home_if_empty(self, home: str) -> None:
        """Drop `home`'s share once it has no session and nobody waiting."""
        h = self.homes.get(home)
        if h is not None and not h.sessions and not h.queued and not h.commands:
            del self.homes[home]

    def taken(self, home: str, agent_key: bytes) -> PooledSession | None:
        """The agent's session, now the most recently used; None when there is none."""
        s = self.sessions.get((home, agent_key))
        if s is not None:
            self.sessions.move_to_end((home, agent_key))
        return s

    def make_room(
        self, home: str, *, per_home: int, warm: int, referenced: Callable[[PooledSession], bool]
    ) -> None:
        """Before a new session of `home`: refuse past `per_home` sessions of one home, and
        close the least recently used idle sessions until fewer than `warm` are open.

        Raises:
            Refusal: `E_CAP_EXCEEDED {cap: sessions}` (PROTOCOL.md part B's cap words).
        """
        h = self.share(home)
        if len(h.sessions) >= per_home:
            raise Refusal(
                Code.E_CAP_EXCEEDED,
                {"cap": Cap.SESSIONS.value, "max": per_home, "asked": len(h.sessions) + 1},
            )
        evict_for_room(self.sessions.values(), lambda: len(self.sessions), warm, referenced)

    def add(self, s: PooledSession) -> None:
        """Hold new session `s` (the most recently used)."""
        self.sessions[(s.home, s.agent_key)] = s
        self.share(s.home).sessions[s.agent_key] = s

    def remove(self, s: PooledSession) -> str:
        """Forget closed session `s` and count its end; returns the end reason."""
        key = (s.home, s.agent_key)
        if self.sessions.get(key) is s:
            del self.sessions[key]
        h = self.homes.get(s.home)
        if h is not None and h.sessions.get(s.agent_key) is s:
            del h.sessions[s.agent_key]
            self.forget_home_if_empty(s.home)
        reason = s.end_reason or TunEndReason.CLOSED.value
        self.drops[reason] = self.drops.get(reason, 0) + 1
        return reason

    def on_roster(self, home: str, roster: Roster) -> None:
        """Close every session of `home` whose agent `roster` no longer lists (`revoked`);
        the others take their new grant."""
        h = self.homes.get(home)
        if h is None:
            return
        listed = roster.agents()
        for key, s in list(h.sessions.items()):
            if key not in listed:
                s.close(TunEndReason.REVOKED.value)
            else:
                s.grant = listed[key]

    def close_all(self, reason: str) -> None:
        """Close every session with `reason`."""
        for s in list(self.sessions.values()):
            s.close(reason)

    def anyone_waiting(self) -> bool:
        """Whether a read or a command waits in any home's queue."""
        return any(h.queued or h.commands for h in self.homes.values())

    def statistics(self, calls_in_flight: int) -> PoolStats:
        """Counts at this moment (`PoolStats`), with the pool's `calls_in_flight`."""
        states = [s.state for s in self.sessions.values()]
        busy = states.count(State.BUSY)
        return PoolStats(
            sessions=states.count(State.READY) + busy,
            opening=states.count(State.OPENING),
            busy=busy,
            calls_in_flight=calls_in_flight,
            queued=sum(h.queued + h.commands for h in self.homes.values()),
            drops=dict(self.drops),
        )
