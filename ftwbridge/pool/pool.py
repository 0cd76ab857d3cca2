"""One warm session per agent, opened through the keys part and the door (PROTOCOL.md B, C).

`Pool.call(home, agent_key, read, body)` admits the agent against the home's newest roster by
the bridge's own clock (once per call), waits its pacing turn, takes the agent's pooled session
(opening it if none is warm: Noise handshake via the keys part through a door tunnel, then
`hello` and `hello_ok`), sends the read, and waits for the answer to that request's own id.
Refusals are `proto.refusal.Refusal` (a registry code and its details); the MCP layer owns the
words.

The pool keeps admission, queueing, pacing, eviction and drain; a session's own states are in
`pool.session`. A session has a task only while it opens. Once open, the uplink's reader hands
it the box's messages, and one pool task keeps a deadline heap that closes sessions idle past
`idle_close_s` or holding a request the box has not answered within `call_deadline_s`. A
closing session's tunnel is ended by a short task (the box hears `tun.end {reason}`, bounded),
so nothing is left behind and no call hangs.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.door import Door, LocalEnd, TunEnded, tun_end_reason
from ftwbridge.keys.service import KeysPort
from ftwbridge.proto.control import CmdAck, new_cmd_id
from ftwbridge.proto.errors import LocalProtocolError
from ftwbridge.proto.names import Cap, Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant, Roster, admit
from ftwbridge.proto.session import AgentSession, Reply

from .command import CommandBudget, CommandOutcome, Renames, send_command
from .deadlines import DeadlineHeap
from .feed import Feeds
from .homes import HomeShare, PoolObserver, PoolStats
from .opening import open_outcome
from .pacing import HomePacer
from .session import REPLACEABLE, PooledSession, State, Waiter, refusal_for_end

log = logging.getLogger("ftwbridge.pool")

ANSWER_EWMA = 0.3
"""Weight of the newest answer time in a home's running estimate (for retry hints)."""


class Pool:
    """Warm agent sessions for one bridge process.

    Args:
        door: where tunnels to homes open.
        keys: the keys part (in-process or over its socket).
        config: `idle_close_s`, `handshake_s`, `queue_per_home`, `warm_sessions`,
            `sessions_per_home`, `calls_in_flight`, `call_deadline_s`, `clock_skew_max_ms`.
        wall_ms: the bridge's wall clock, ms since the epoch (expiry is judged by it).
        observer: told queue waits and session openings (metrics), if given.
    """

    def __init__(
        self,
        *,
        door: Door,
        keys: KeysPort,
        config: Config,
        wall_ms: Callable[[], int],
        observer: PoolObserver | None = None,
    ):
        self._door = door
        self._keys = keys
        self._config = config
        self._wall_ms = wall_ms
        self._sessions: OrderedDict[tuple[str, bytes], PooledSession] = OrderedDict()
        """Open and opening sessions, least recently used first."""
        self._homes: dict[str, HomeShare] = {}
        self._in_flight = 0
        self._limiter = trio.CapacityLimiter(config.calls_in_flight)
        self._drops: dict[str, int] = {}
        self._draining = False
        self._observer = observer
        self._changed = trio.Event()
        self.pacer = HomePacer(config)
        self._nursery: trio.Nursery | None = None
        self._deadlines = DeadlineHeap(self._due)
        self._orphans: list[PooledSession] = []
        """Closed sessions whose tunnels are still to be ended (by `_finish_orphans`)."""
        self._closing = 0
        """Sessions CLOSING: their box is still to hear `tun.end`."""
        self._budget = CommandBudget()
        """`cmds_per_hour` at the bridge (pool/command.py)."""
        self._renames = Renames()
        """Each agent's latest `cmdId` changed after `E_CONFLICT` (pool/command.py)."""
        self.feeds = Feeds(self, hz=config.live_feed_hz, start_s=config.call_deadline_s)
        """Live telemetry feeds per (home, agent) on the warm sessions (pool/feed.py)."""

    async def run(self, *, task_status: trio.TaskStatus[Pool] = trio.TASK_STATUS_IGNORED) -> None:
        """Own every opening and closing until cancelled; then end every session
        (`tun.end {restarting}`, bounded)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await self._deadlines.run()
        finally:
            self._nursery = None
            for s in list(self._sessions.values()):
                s.close(TunEndReason.RESTARTING.value)
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 2):
                async with trio.open_nursery() as closing:
                    for s in self._orphans:
                        closing.start_soon(self._finish, s)
                    self._orphans.clear()

    def statistics(self) -> PoolStats:
        """Counts at this moment (see `PoolStats`)."""
        states = [s.state for s in self._sessions.values()]
        busy = states.count(State.BUSY)
        return PoolStats(
            sessions=states.count(State.READY) + busy,
            opening=states.count(State.OPENING),
            busy=busy,
            calls_in_flight=self._in_flight,
            queued=sum(h.queued + h.commands for h in self._homes.values()),
            drops=dict(self._drops),
        )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._changed.wait()

    @property
    def draining(self) -> bool:
        """True once `drain` has begun: no new calls are taken."""
        return self._draining

    async def drain(self, grace_s: float) -> None:
        """Stop taking calls, let calls in flight finish within `grace_s` seconds, then end every
        session (`tun.end {restarting}`) and wait (1 s at most) until they are gone.

        Later calls are refused `E_UNAVAILABLE {reason: restarting}`.
        """
        self._draining = True
        with trio.move_on_after(grace_s):
            await self._wait_until(
                lambda: (
                    self._in_flight == 0
                    and not any(h.queued or h.commands for h in self._homes.values())
                )
            )
        for s in list(self._sessions.values()):
            s.close(TunEndReason.RESTARTING.value)
        with trio.move_on_after(1):
            await self._wait_until(lambda: not self._sessions and not self._closing)

    def spawn(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn(*args)` in the pool's nursery (a live feed's task); False when the pool is
        not running or is draining."""
        if self._nursery is None or self._draining:
            return False
        try:
            self._nursery.start_soon(fn, *args)
        except RuntimeError:  # the nursery is closing
            return False
        return True

    def live_view(self, home: str, agent_key: bytes) -> dict[str, Any] | None:
        """A fresh `live` answer (PROTOCOL.md part B) from the agent's running live feed, or
        None when there is none (then read the box). No I/O (pool/feed.py)."""
        return self.feeds.live_view(home, agent_key)

    def warm_grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        """The grant of a warm session, if any (for `homes_list`)."""
        s = self._sessions.get((home, agent_key))
        return s.grant if s is not None else None

    async def on_roster(self, home: str, roster: Roster) -> None:
        """Close at once every session of `home` whose agent the new roster no longer lists."""
        h = self._homes.get(home)
        if h is None:
            return
        listed = roster.agents()
        for key, s in list(h.sessions.items()):
            if key not in listed:
                s.close(TunEndReason.REVOKED.value)
            else:
                s.grant = listed[key]

    # -- calls ------------------------------------------------------------------------------

    def _home(self, home: str) -> HomeShare:
        h = self._homes.get(home)
        if h is None:
            h = self._homes[home] = HomeShare()
        return h

    def _forget_home_if_empty(self, home: str) -> None:
        h = self._homes.get(home)
        if h is not None and not h.sessions and not h.queued and not h.commands:
            del self._homes[home]

    def retry_hint_ms(self, home: str) -> int:
        """What a call refused for a full queue at `home` should wait (ms): the longest of its
        pacing wait, one pacing interval, the box's recent answer time, and how long the oldest
        request now at the box has waited (a stalled box shows there), at most the call deadline.
        """
        now = trio.current_time()
        h = self._homes.get(home)
        oldest = 0.0
        answer_s = 0.0
        if h is not None:
            answer_s = h.answer_s
            oldest = max((now - s.sent_at for s in h.sessions.values() if s.at_box), default=0.0)
        wait = max(self.pacer.wait_s(home), 1 / self._config.pace_calls_per_s, answer_s, oldest)
        return math.ceil(1000 * min(wait, self._config.call_deadline_s))

    async def call(self, home: str, agent_key: bytes, read: str, body: Any = None) -> Reply:
        """Ask `home`'s box one read (or `goal.request`) as agent `agent_key` (32 bytes);
        returns its `Reply`.

        The caller owns the deadline (a cancel scope); a cancelled call frees its place, and a
        request it leaves at the box keeps the session until the box answers (issue 11, D2).

        Raises:
            Refusal: admission, the queue, the box, or the session ending refused it.
        """
        async with self.hold(home, agent_key) as (s, _grant):
            reply = await self.exchange(s, lambda agent: agent.request(str(read), body))
            self.pacer.charge_bytes(home, reply.size)
            return reply

    async def command(
        self, home: str, agent_key: bytes, op: str, args: dict[str, Any], cmd_id: str
    ) -> CommandOutcome:
        """Send command `op` with `args` as `cmd_id` (`pool/command.py` has the steps).

        Raises:
            Refusal: as `call`, and `cmds_per_hour` at the bridge.
        """
        return await send_command(
            self,
            home,
            agent_key,
            op,
            args,
            cmd_id=cmd_id,
            new_cmd_id=self.new_cmd_id,
            budget=self._budget,
            renames=self._renames,
        )

    def new_cmd_id(self) -> str:
        """A new `cmdId`: UUIDv7 text from the bridge's wall clock (PROTOCOL.md part E)."""
        return new_cmd_id(self._wall_ms(), os.urandom(10))

    @contextlib.asynccontextmanager
    async def hold(
        self, home: str, agent_key: bytes, *, command: bool = False
    ) -> AsyncIterator[tuple[PooledSession, AgentGrant]]:
        """Hold the agent's session (BUSY, this task its holder) for one or more requests:
        admission against the newest roster, a place in the home's queue, a pacing turn, then
        the session (opened if none is warm). Yields (session, the agent's grant); on leaving,
        a session still held is released (one whose request is still at the box was given up
        by `exchange`).

        A `command` has its own places in the queue (`queue_per_home` of them besides the
        reads') and waits its pacing turn up to the call deadline instead of `pace_wait_s`, so
        a command waiting behind reads is never dropped for a read (issue 16, item 6).

        Raises:
            Refusal: draining, a full queue, admission, pacing, or the session's end.
        """
        if self._draining:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        h = self._home(home)
        waiting = h.commands if command else h.queued
        if waiting >= self._config.queue_per_home:
            retry_ms = self.retry_hint_ms(home)
            raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
        h.count(command, 1)
        queued = True
        arrived = trio.current_time()
        me = trio.lowlevel.current_task()
        s: PooledSession | None = None
        try:
            roster, grant = await self._admit(home, agent_key)
            await self.pacer.turn(
                home, max_wait_s=self._config.call_deadline_s if command else None
            )
            s = await self._take(home, agent_key, roster, grant)
            h.count(command, -1)
            queued = False
            self._notify()
            if self._observer is not None:
                self._observer.on_queue_wait(trio.current_time() - arrived)
            yield s, grant
        finally:
            if queued:
                h.count(command, -1)
                self._notify()
            if s is not None and not s.is_closed and s.holder is me:
                s.release()
            self._forget_home_if_empty(home)

    async def _take(
        self, home: str, agent_key: bytes, roster: Roster, grant: AgentGrant
    ) -> PooledSession:
        """The agent's session, owned by this task (BUSY); opens one if none is open."""
        me = trio.lowlevel.current_task()
        replaced = False
        while True:
            s = self._sessions.get((home, agent_key))
            if s is None:
                s = self._start(home, agent_key, roster, grant)
            else:
                self._sessions.move_to_end((home, agent_key))
            await s.acquire()
            if s.holder is me:
                return s
            if s.failure is not None:
                raise s.failure
            reason = s.end_reason or TunEndReason.CLOSED.value
            if reason in REPLACEABLE and not replaced:
                replaced = True  # closed by the bridge's own choice as we came: a new one
                continue
            raise refusal_for_end(reason)

    async def _admit(self, home: str, agent_key: bytes) -> tuple[Roster, AgentGrant]:
        roster = await self._door.rosters.roster(home)
        if roster is None:
            raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "home"})
        decision = admit(roster, agent_key, self._wall_ms())
        if isinstance(decision, Refusal):
            s = self._sessions.get((home, agent_key))
            if s is not None:
                s.close(
                    TunEndReason.EXPIRED.value
                    if decision.code is Code.E_GRANT_EXPIRED
                    else TunEndReason.REVOKED.value
                )
            raise decision
        return roster, decision.grant

    def _start(
        self, home: str, agent_key: bytes, roster: Roster, grant: AgentGrant
    ) -> PooledSession:
        if self._nursery is None or self._draining:  # a call that waited past the drain
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        h = self._home(home)
        top = self._config.sessions_per_home
        if len(h.sessions) >= top:
            raise Refusal(
                Code.E_CAP_EXCEEDED,
                {"cap": Cap.SESSIONS.value, "max": top, "asked": len(h.sessions) + 1},
            )
        self._evict_for_room()
        s = PooledSession(self, home, agent_key)
        s.grant = grant
        s.opening = trio.CancelScope()
        try:
            self._nursery.start_soon(self._open_task, s, roster)
        except RuntimeError:  # the pool's nursery is closing: nothing was registered
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"}) from None
        self._sessions[(home, agent_key)] = s
        h.sessions[agent_key] = s
        return s

    def _evict_for_room(self) -> None:
        while len(self._sessions) >= self._config.warm_sessions:
            for s in self._sessions.values():  # least recently used first
                if s.is_available and not s.waiting and not self.feeds.referenced(s):
                    s.close(TunEndReason.IDLE.value)
                    break
            else:
                return

    async def exchange(
        self,
        s: PooledSession,
        start: Callable[[AgentSession], tuple[int, bytes]],
        *,
        acks: list[CmdAck] | None = None,
    ) -> Reply:
        """Send one request on `s` (held by this task, from `hold`) and wait for its answer:
        `start(agent)` makes it (`AgentSession.request` or `.command`) and returns (id,
        message). The session stays held for a next request; `hold` releases it. A command's
        `cmd.ack`, if one came, is appended to `acks`, also when the wait is cancelled.

        Raises:
            Refusal: the box refused, the door dropped the message, or the session ended.
        """
        await self._limiter.acquire_on_behalf_of(s)
        self._in_flight += 1
        s.at_box = True
        s.sent_at = trio.current_time()
        self._notify()
        if s.is_closed:  # ended while we waited for a slot
            self.box_done(s, answered=False)
            raise refusal_for_end(s.end_reason or TunEndReason.CLOSED.value)
        assert s.agent is not None and s.tun is not None
        try:
            rid, message = start(s.agent)
        except LocalProtocolError:  # the box ended the session while we waited
            s.close(s.end_reason or TunEndReason.CLOSED.value)
            raise refusal_for_end(s.end_reason or TunEndReason.CLOSED.value) from None
        waiter = s.waiter = Waiter(rid)
        sent = False
        try:
            try:
                sent = await s.tun.send(message)  # cancelled here: nothing was sent
            except TunEnded as exc:
                s.close(exc.reason)
                raise refusal_for_end(s.end_reason or exc.reason) from None
            if not sent:  # the door dropped it past the home's limit: say so now
                retry_ms = math.ceil(1000 / self._config.door_msgs_per_s)
                raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
            await waiter.done.wait()
        finally:
            if acks is not None and waiter.ack is not None:
                acks.append(waiter.ack)
            if not sent and not s.is_closed:  # the box never got it: nothing to wait for
                s.agent.abandon(sent=False)
                self.box_done(s, answered=False)
            if not s.is_closed and s.holder is trio.lowlevel.current_task():
                if s.at_box and not waiter.done.is_set():
                    s.give_up()  # the box still works on it: the session waits for that
                    self._deadlines.schedule(s, s.sent_at + self._config.call_deadline_s)
                else:
                    s.waiter = None
        if waiter.refusal is not None:
            raise waiter.refusal
        assert waiter.reply is not None
        return waiter.reply

    # -- what sessions tell the pool --------------------------------------------------------

    def session_closed(self, s: PooledSession) -> None:
        """`s` moved to CLOSING: forget it, and end its tunnel in a short task (an opening
        session's own task does that)."""
        key = (s.home, s.agent_key)
        if self._sessions.get(key) is s:
            del self._sessions[key]
        h = self._homes.get(s.home)
        if h is not None and h.sessions.get(s.agent_key) is s:
            del h.sessions[s.agent_key]
            self._forget_home_if_empty(s.home)
        reason = s.end_reason or TunEndReason.CLOSED.value
        self.feeds.session_closed(s)
        self._drops[reason] = self._drops.get(reason, 0) + 1
        self._closing += 1
        self._notify()
        log.info("session end home=%s reason=%s", s.home, reason)
        if s.opening is None:
            self._orphans.append(s)
            if self._nursery is not None:
                with contextlib.suppress(RuntimeError):  # closed to new arrivals: run's finally
                    self._nursery.start_soon(self._finish_orphans)

    def session_released(self, s: PooledSession) -> None:
        """`s` is READY with nobody waiting: it closes after `idle_close_s` unless taken."""
        s.idle_at = trio.current_time() + self._config.idle_close_s
        self._deadlines.schedule(s, s.idle_at)

    def box_done(self, s: PooledSession, answered: bool) -> None:
        """The box finished `s`'s request (`answered`) or never will: its slot is free."""
        s.at_box = False
        self._limiter.release_on_behalf_of(s)
        self._in_flight -= 1
        if answered:
            h = self._homes.get(s.home)
            if h is not None:
                took = trio.current_time() - s.sent_at
                h.answer_s += ANSWER_EWMA * (took - h.answer_s)
        self._notify()

    async def _finish_orphans(self) -> None:
        while self._orphans:
            s = self._orphans.pop()
            await self._finish(s)

    async def _finish(self, s: PooledSession) -> None:
        reason = s.end_reason or TunEndReason.CLOSED.value
        if s.tun is not None:  # the box hears tun.end (bounded, shielded)
            await s.tun.aclose(tun_end_reason(reason))
        self._ended(s)

    def _ended(self, s: PooledSession) -> None:
        s.ended()
        self._closing -= 1
        self._notify()

    # -- the deadline heap ------------------------------------------------------------------

    def _due(self, s: PooledSession, now: float) -> None:
        """The deadline heap's look at `s`: close it when idle past `idle_close_s`, or when its
        box has not answered, within `call_deadline_s`, a request whose caller gave up."""
        if s.state is State.READY:
            if s.has_expired(now) and self.feeds.referenced(s):  # a live feed holds it
                s.idle_at = now + self._config.idle_close_s
                self._deadlines.schedule(s, s.idle_at)
            elif s.has_expired(now):
                s.close(TunEndReason.IDLE.value)
            else:
                self._deadlines.schedule(s, s.idle_at)
        elif s.is_abandoned:
            due = s.sent_at + self._config.call_deadline_s
            if now >= due:
                s.close(LocalEnd.NO_ANSWER.value)
            else:
                self._deadlines.schedule(s, due)

    # -- opening ----------------------------------------------------------------------------

    async def _open_task(self, s: PooledSession, roster: Roster) -> None:
        started = trio.current_time()
        outcome = "ok"
        scope = s.opening
        assert scope is not None
        try:
            with scope:
                outcome = await open_outcome(
                    s,
                    roster,
                    door=self._door,
                    keys=self._keys,
                    config=self._config,
                    wall_ms=self._wall_ms,
                )
            if scope.cancelled_caught:  # closed from outside (revoked, drain, uplink)
                outcome = "closed"
        finally:
            if s.state is State.OPENING:  # cancelled from outside (the pool is stopping)
                outcome = "closed"
                s.close(TunEndReason.RESTARTING.value)
            if self._observer is not None:
                self._observer.on_open(outcome, trio.current_time() - started)
            if s.opening is not None:  # closed while opening: this task ends it
                s.opening = None
                with trio.CancelScope(shield=True):
                    await self._finish(s)
