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
import heapq
import itertools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from ftwbridge.config import Config
from ftwbridge.door import Door, HomeOffline, LocalEnd, TunEnded, tun_end_reason
from ftwbridge.keys.service import KeysError, KeysPort
from ftwbridge.proto.errors import LocalProtocolError, ProtocolError
from ftwbridge.proto.names import Cap, Code, Read, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import Msg, peer_code, peer_reason
from ftwbridge.proto.roster import AgentGrant, Roster, admit
from ftwbridge.proto.session import AgentSession, Push, Reply, Terminated

from .pacing import HomePacer
from .session import REPLACEABLE, PooledSession, State, Waiter, refusal_for_end

log = logging.getLogger("ftwbridge.pool")

HELLO_BODY = {
    "proto": {"min": 1, "max": 1},
    "app": {"build": "ftwbridge", "ua": "agent"},
    "locales": ["en"],
}
ANSWER_EWMA = 0.3
"""Weight of the newest answer time in a home's running estimate (for retry hints)."""


@dataclass(slots=True)
class PoolStats:
    """`Pool.statistics()`: sessions by state (`sessions` = ready + busy), calls whose request
    is at a box (`calls_in_flight`, including those whose caller gave up), calls waiting for a
    session (`queued`), and how many sessions ended, by reason."""

    sessions: int
    opening: int
    busy: int
    calls_in_flight: int
    queued: int
    drops: dict[str, int]


class PoolObserver(Protocol):
    """Where the pool reports timings (the bridge's metrics fit)."""

    def on_queue_wait(self, seconds: float) -> None: ...
    def on_open(self, outcome: str, seconds: float) -> None: ...


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


class _Home:
    """One home's share of the pool: its open sessions by agent key, its queue, and how long
    its box has taken to answer (seconds, a running estimate)."""

    __slots__ = ("answer_s", "queued", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[bytes, PooledSession] = {}
        self.queued = 0
        self.answer_s = 0.0


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
        self._homes: dict[str, _Home] = {}
        self._in_flight = 0
        self._limiter = trio.CapacityLimiter(config.calls_in_flight)
        self._drops: dict[str, int] = {}
        self._draining = False
        self._observer = observer
        self._changed = trio.Event()
        self.pacer = HomePacer(config)
        self._nursery: trio.Nursery | None = None
        self._heap: list[tuple[float, int, PooledSession]] = []
        self._seq = itertools.count()
        self._reaper: trio.CancelScope | None = None
        self._orphans: list[PooledSession] = []
        self._closing = 0
        """Sessions CLOSING: their box is still to hear `tun.end`."""
        """Closed sessions whose tunnels are still to be ended (by `_finish_orphans`)."""

    async def run(self, *, task_status: trio.TaskStatus[Pool] = trio.TASK_STATUS_IGNORED) -> None:
        """Own every opening and closing until cancelled; then end every session
        (`tun.end {restarting}`, bounded)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await self._reap()
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
            queued=sum(h.queued for h in self._homes.values()),
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
                lambda: self._in_flight == 0 and not any(h.queued for h in self._homes.values())
            )
        for s in list(self._sessions.values()):
            s.close(TunEndReason.RESTARTING.value)
        with trio.move_on_after(1):
            await self._wait_until(lambda: not self._sessions and not self._closing)

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

    def _home(self, home: str) -> _Home:
        h = self._homes.get(home)
        if h is None:
            h = self._homes[home] = _Home()
        return h

    def _forget_home_if_empty(self, home: str) -> None:
        h = self._homes.get(home)
        if h is not None and not h.sessions and not h.queued:
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

    async def call(self, home: str, agent_key: bytes, read: Read, body: Any = None) -> Reply:
        """Ask `home`'s box one read as agent `agent_key` (32 bytes); returns its `Reply`.

        The caller owns the deadline (a cancel scope); a cancelled call frees its place, and a
        request it leaves at the box keeps the session until the box answers (issue 11, D2).

        Raises:
            Refusal: admission, the queue, the box, or the session ending refused it.
        """
        if self._draining:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        h = self._home(home)
        if h.queued >= self._config.queue_per_home:
            retry_ms = self.retry_hint_ms(home)
            raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
        h.queued += 1
        queued = True
        arrived = trio.current_time()
        try:
            roster, grant = await self._admit(home, agent_key)
            await self.pacer.turn(home)
            s = await self._take(home, agent_key, roster, grant)
            h.queued -= 1
            queued = False
            self._notify()
            if self._observer is not None:
                self._observer.on_queue_wait(trio.current_time() - arrived)
            reply = await self._exchange(s, read, body)
            self.pacer.charge_bytes(home, reply.size)
            return reply
        finally:
            if queued:
                h.queued -= 1
                self._notify()
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
        roster = await self._door.roster(home)
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
                if s.is_available and not s.waiting:
                    s.close(TunEndReason.IDLE.value)
                    break
            else:
                return

    async def _exchange(self, s: PooledSession, read: Read, body: Any) -> Reply:
        """Send one request on `s` (held by this task) and wait for its answer."""
        try:
            await self._limiter.acquire_on_behalf_of(s)
        except BaseException:
            s.release()
            raise
        self._in_flight += 1
        s.at_box = True
        s.sent_at = trio.current_time()
        self._notify()
        if s.is_closed:  # ended while we waited for a slot
            self.box_done(s, answered=False)
            raise refusal_for_end(s.end_reason or TunEndReason.CLOSED.value)
        assert s.agent is not None and s.tun is not None
        try:
            rid, message = s.agent.request(read.value, body)
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
            if not sent and not s.is_closed:  # the box never got it: nothing to wait for
                s.agent.abandon(sent=False)
                self.box_done(s, answered=False)
            if not s.is_closed and s.holder is trio.lowlevel.current_task():
                if s.at_box and not waiter.done.is_set():
                    s.give_up()  # the box still works on it: the session waits for that
                    self._schedule(s, s.sent_at + self._config.call_deadline_s)
                else:
                    s.release()
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
        self._schedule(s, s.idle_at)

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

    def _schedule(self, s: PooledSession, when: float) -> None:
        """Have the heap look at `s` at `when` (trio seconds) unless it looks sooner already."""
        if when >= s.check_at:
            return
        s.check_at = when
        heapq.heappush(self._heap, (when, next(self._seq), s))
        if self._reaper is not None and when < self._reaper.deadline:
            self._reaper.deadline = when

    async def _reap(self) -> None:
        """The pool's one timer: close sessions idle past their deadline, and sessions whose
        box has not answered a request its caller gave up on within `call_deadline_s`."""
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._reaper = scope
                await trio.sleep_forever()
            self._reaper = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                when, _, s = heapq.heappop(heap)
                if s.check_at != when:
                    continue  # a sooner look replaced this one
                s.check_at = math.inf
                if s.is_closed:
                    continue
                if s.state is State.READY:
                    if s.has_expired(now):
                        s.close(TunEndReason.IDLE.value)
                    else:
                        self._schedule(s, s.idle_at)
                elif s.is_abandoned:
                    due = s.sent_at + self._config.call_deadline_s
                    if now >= due:
                        s.close(LocalEnd.NO_ANSWER.value)
                    else:
                        self._schedule(s, due)

    # -- opening ----------------------------------------------------------------------------

    async def _open_task(self, s: PooledSession, roster: Roster) -> None:
        started = trio.current_time()
        outcome = "ok"
        scope = s.opening
        assert scope is not None
        try:
            with scope:
                try:
                    await self._open(s, roster)
                    if s.is_closed:  # closed from outside while it opened
                        outcome = "closed"
                except Refusal as exc:
                    outcome = exc.code
                    s.failure = exc
                    s.close(LocalEnd.REFUSED.value)
                except TunEnded as exc:
                    outcome = "closed"
                    s.close(exc.reason)
                except ProtocolError:
                    outcome = "closed"
                    s.close(LocalEnd.PROTOCOL_ERROR.value)
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

    async def _open(self, s: PooledSession, roster: Roster) -> None:
        assert roster.noise is not None
        try:
            tun = s.tun = await self._door.open_tun(s.home)
        except HomeOffline:
            raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "door"}) from None
        tun.on_end = s.close
        handle: int | None = None
        with trio.move_on_after(self._config.handshake_s) as deadline:
            try:
                handle, m1 = await self._keys.begin(s.agent_key, roster.noise)
                if not await tun.send(m1):
                    raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": 1000}, 1000)
                m2 = await tun.receive()
                keys = await self._keys.finish(handle, m2)
                handle = None
            except KeysError as exc:
                if exc.bad_message:  # the box's message 2 did not complete the handshake
                    raise Refusal(Code.E_UNAVAILABLE, {"reason": "handshake_failed"}) from None
                what = "agent_key" if exc.unknown_key else "keys"
                raise Refusal(Code.E_UNAVAILABLE, {"subsystem": what}) from None
            finally:
                if handle is not None:
                    with (
                        trio.CancelScope(shield=True),
                        trio.move_on_after(1),
                        contextlib.suppress(KeysError),
                    ):
                        await self._keys.abort(handle)
            s.agent = AgentSession(keys)
            if not await tun.send(s.agent.notify(Msg.HELLO, HELLO_BODY)):
                raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": 1000}, 1000)
            await self._wait_hello_ok(s)
            while early := tun.queued():  # came after hello_ok, before the sink: in order
                for message in early:
                    await s.deliver(message)
            if s.is_closed:
                return
            tun.attach(s.deliver)  # no await since the queue emptied: nothing out of order
            s.opened()
        if deadline.cancelled_caught:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "no_answer"})

    async def _wait_hello_ok(self, s: PooledSession) -> None:
        assert s.agent is not None and s.tun is not None
        while True:
            for ev in s.agent.receive(await s.tun.receive()):
                if isinstance(ev, Push) and ev.t == Msg.HELLO_OK and isinstance(ev.body, dict):
                    check_clock(ev.body, self._wall_ms(), self._config.clock_skew_max_ms)
                    return  # nothing else of it is kept: 3 KiB a session (issue 12, item 6)
                if isinstance(ev, Push) and ev.t == Msg.ERROR and isinstance(ev.body, dict):
                    args = ev.body.get("args")
                    raise Refusal(
                        peer_code(ev.body.get("code")), args if isinstance(args, dict) else {}
                    )
                if isinstance(ev, Terminated):
                    raise refusal_for_end(peer_reason(ev.reason))
