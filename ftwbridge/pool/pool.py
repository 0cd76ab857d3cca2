"""One warm session per agent, opened through the keys part and the door (PROTOCOL.md B, C).

`Pool.call(home, agent_key, read, body)` admits the agent against the home's newest roster by
the bridge's own clock (once per call), waits its pacing turn, takes the agent's pooled session
(opening it if none is warm: Noise handshake via the keys part through a door tunnel, then
`hello` and `hello_ok`), sends the read, and waits for the answer to that request's own id.
Refusals are `proto.refusal.Refusal` (a registry code and its details); the MCP layer owns the
words.

`Pool` holds the queue and the drain and composes the rest: admission (`admission.py`), the
session table and the homes' shares (`table.py`), pacing (`pacing.py`), eviction
(`eviction.py`), the command budget (`command.py`); a session's own states are in
`pool.session`. A session has a task only while it opens. Once open, the uplink's reader hands
it the box's messages, and one pool task keeps a deadline heap that closes sessions idle past
`idle_close_s` or holding a request the box has not answered within `call_deadline_s`. A
closing session's tunnel is ended by a short task (the box hears `tun.end {reason}`, bounded),
so nothing is left behind and no call hangs.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

from ftwbridge.config import Config
from ftwbridge.door import Door
from ftwbridge.keys.service import KeysPort
from ftwbridge.proto.control import CmdAck, new_cmd_id
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.roster import AgentGrant, Roster
from ftwbridge.proto.session import AgentSession, Reply

from .admission import admit_agent, full_queue, retry_hint_ms
from .closing import Closings
from .command import CommandBudget, CommandOutcome, Renames, send_command
from .deadlines import DeadlineHeap
from .eviction import look
from .exchange import AtBoxes
from .feed import Feeds
from .homes import PoolObserver, PoolStats
from .opening import open_task, opening_scope
from .pacing import HomePacer
from .session import REPLACEABLE, PooledSession, refusal_for_end
from .table import SessionTable

log = logging.getLogger("ftwbridge.pool")


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
        self._table = SessionTable()
        """The sessions and the homes' shares (pool/table.py)."""
        self._sessions = self._table.sessions
        self._homes = self._table.homes
        self._draining = False
        self._observer = observer
        self._changed = trio.Event()
        self._watching = 0
        """Tasks in `_wait_until` (`drain`'s): `_notify` swaps `_changed` only for them."""
        self.pacer = HomePacer(config)
        self._nursery: trio.Nursery | None = None
        self._deadlines = DeadlineHeap(self._due)
        self._at_boxes = AtBoxes(config, self._homes, self._notify, self._deadlines.schedule)
        """The requests at the boxes, `calls_in_flight` at most (pool/exchange.py)."""
        self._closings = Closings(self._notify)
        """Sessions closed whose box is still to hear `tun.end` (pool/closing.py)."""
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
            self._table.close_all(TunEndReason.RESTARTING.value)
            await self._closings.end_all()

    def statistics(self) -> PoolStats:
        """Counts at this moment (see `PoolStats`)."""
        return self._table.statistics(self._at_boxes.count)

    def _notify(self) -> None:
        """Wake `_wait_until` to look again (nothing to do while nobody waits there)."""
        if self._watching:
            self._changed.set()
            self._changed = trio.Event()

    async def _wait_until(self, done: Callable[[], bool]) -> None:
        self._watching += 1
        try:
            while not done():
                await self._changed.wait()
        finally:
            self._watching -= 1

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
                lambda: self._at_boxes.count == 0 and not self._table.anyone_waiting()
            )
        self._table.close_all(TunEndReason.RESTARTING.value)
        with trio.move_on_after(1):
            await self._wait_until(lambda: not self._sessions and not self._closings.count)

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

    async def grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        """The agent's row in `home`'s newest roster (`Door.grant`), or None: what `/mcp`
        checks a call's scopes against before it queues (`mcp.control.ControlPort`)."""
        return await self._door.grant(home, agent_key)

    async def on_roster(self, home: str, roster: Roster) -> None:
        """Close at once every session of `home` whose agent the new roster no longer lists."""
        self._table.on_roster(home, roster)

    # -- calls ------------------------------------------------------------------------------

    def retry_hint_ms(self, home: str) -> int:
        """What a call refused for a full queue at `home` should wait (ms; see
        `admission.retry_hint_ms`)."""
        return retry_hint_ms(
            self._homes.get(home),
            trio.current_time(),
            pacing_wait_s=self.pacer.wait_s(home),
            pace_calls_per_s=self._config.pace_calls_per_s,
            call_deadline_s=self._config.call_deadline_s,
        )

    async def call(self, home: str, agent_key: bytes, read: str, body: Any = None) -> Reply:
        """Ask `home`'s box one read (or `goal.request`) as agent `agent_key` (32 bytes);
        returns its `Reply`.

        The caller owns the deadline (a cancel scope); a cancelled call frees its place, and a
        request it leaves at the box keeps the session until the box answers or
        `call_deadline_s` passes (pool/session.py, "given up").

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
        a command waiting behind reads is never dropped for a read (docs/control.md).

        Raises:
            Refusal: draining, a full queue, admission, pacing, or the session's end.
        """
        if self._draining:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        h = self._table.share(home)
        waiting = h.commands if command else h.queued
        if waiting >= self._config.queue_per_home:
            raise full_queue(self.retry_hint_ms(home))
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
            self._table.forget_home_if_empty(home)

    async def _take(
        self, home: str, agent_key: bytes, roster: Roster, grant: AgentGrant
    ) -> PooledSession:
        """The agent's session, owned by this task (BUSY); opens one if none is open."""
        me = trio.lowlevel.current_task()
        replaced = False
        while True:
            s = self._table.taken(home, agent_key)
            if s is None:
                s = self._start(home, agent_key, roster, grant)
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
        warm = self._sessions.get((home, agent_key))
        return await admit_agent(self._door.rosters, warm, home, agent_key, self._wall_ms())

    def _start(
        self, home: str, agent_key: bytes, roster: Roster, grant: AgentGrant
    ) -> PooledSession:
        if self._nursery is None or self._draining:  # a call that waited past the drain
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        self._table.make_room(
            home,
            per_home=self._config.sessions_per_home,
            warm=self._config.warm_sessions,
            referenced=self.feeds.referenced,
        )
        s = PooledSession(self, home, agent_key)
        s.grant = grant
        s.opening = opening_scope(self._config)
        try:
            self._nursery.start_soon(self._open_task, s, roster)
        except RuntimeError:  # the pool's nursery is closing: nothing was registered
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"}) from None
        self._table.add(s)
        return s

    async def exchange(
        self,
        s: PooledSession,
        start: Callable[[AgentSession], tuple[int, bytes]],
        *,
        acks: list[CmdAck] | None = None,
    ) -> Reply:
        """`AtBoxes.exchange`: one request on `s`, held by this task (pool/exchange.py).

        Raises:
            Refusal: the box refused, the door dropped the message, or the session ended.
        """
        return await self._at_boxes.exchange(s, start, acks=acks)

    # -- what sessions tell the pool --------------------------------------------------------

    def session_closed(self, s: PooledSession) -> None:
        """`s` moved to CLOSING: forget it, and end its tunnel in a short task (an opening
        session's own task does that)."""
        reason = self._table.remove(s)
        self.feeds.session_closed(s)
        log.info("session end home=%s reason=%s", s.home, reason)
        self._closings.closed(s, self._nursery)

    def session_released(self, s: PooledSession) -> None:
        """`s` is READY with nobody waiting: it closes after `idle_close_s` unless taken."""
        s.idle_at = trio.current_time() + self._config.idle_close_s
        self._deadlines.schedule(s, s.idle_at)

    def box_done(self, s: PooledSession, answered: bool) -> None:
        """The box finished `s`'s request (`answered`) or never will: its slot is free."""
        self._at_boxes.box_done(s, answered)

    # -- the deadline heap ------------------------------------------------------------------

    def _due(self, s: PooledSession, now: float) -> None:
        look(
            s,
            now,
            idle_close_s=self._config.idle_close_s,
            call_deadline_s=self._config.call_deadline_s,
            referenced=self.feeds.referenced,
            schedule=self._deadlines.schedule,
        )

    async def _open_task(self, s: PooledSession, roster: Roster) -> None:
        await open_task(
            s,
            roster,
            door=self._door,
            keys=self._keys,
            config=self._config,
            wall_ms=self._wall_ms,
            on_open=None if self._observer is None else self._observer.on_open,
            finish=self._closings.finish,
        )
