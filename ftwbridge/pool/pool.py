"""One warm session per agent, opened through the keys part and the door (PROTOCOL.md B, C).

`Pool.call(home, agent_key, read, body)` admits the agent against the home's newest roster by
the bridge's own clock, opens its session if none is warm (Noise handshake via the keys part
through a door tunnel, then `hello` and `hello_ok`), sends the read, and waits for the answer
to that request's own id. Each session is owned by one task in the pool's nursery; callers
only wait on it. Refusals are `proto.refusal.Refusal` (a registry code and its details); the
MCP layer owns the words.

Resource handling: a session's task owns its tunnel and its keys-part handshake; whatever ends
it (idle, roster drop, expiry, the box leaving, cancellation) runs one shielded `finally` that
ends the tunnel (the box hears `tun.end {reason}`), removes the session, and answers a waiting
caller with a refusal, so nothing is left behind and no call hangs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

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
from .warm import (
    HELLO_BODY,
    PoolObserver,
    PoolStats,
    Waiter,
    Warm,
    check_clock,
    closed_idle,
    deliver,
    refusal_for_end,
)

log = logging.getLogger("ftwbridge.pool")


class Pool:
    """Warm agent sessions for one bridge process.

    Args:
        door: where tunnels to homes open.
        keys: the keys part (in-process or over its socket).
        config: `idle_close_s`, `handshake_s`, `queue_per_home`, `warm_sessions`,
            `sessions_per_home`, `calls_in_flight`, `clock_skew_max_ms`.
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
        self._warm: OrderedDict[tuple[str, bytes], Warm] = OrderedDict()
        self._queued: dict[str, int] = {}
        self._in_flight = 0
        self._limiter = trio.CapacityLimiter(config.calls_in_flight)
        self._drops: dict[str, int] = {}
        self._draining = False
        self._observer = observer
        self._changed = trio.Event()
        self.pacer = HomePacer(config)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[Pool] = trio.TASK_STATUS_IGNORED) -> None:
        """Own every session task until cancelled; ends all sessions (`restarting`) on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self._nursery = None

    def statistics(self) -> PoolStats:
        """Counts at this moment (see `PoolStats`)."""
        ready = sum(1 for w in self._warm.values() if w.ready.is_set() and w.failure is None)
        return PoolStats(
            sessions=ready,
            opening=sum(1 for w in self._warm.values() if not w.ready.is_set()),
            calls_in_flight=self._in_flight,
            queued=sum(self._queued.values()),
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
            await self._wait_until(lambda: self._in_flight == 0 and not any(self._queued.values()))
        for w in list(self._warm.values()):
            w.close(TunEndReason.RESTARTING.value)
        with trio.move_on_after(1):
            await self._wait_until(lambda: not self._warm)

    def warm_grant(self, home: str, agent_key: bytes) -> AgentGrant | None:
        """The grant of a warm session, if any (for `homes_list`)."""
        w = self._warm.get((home, agent_key))
        return w.grant if w is not None else None

    async def on_roster(self, home: str, roster: Roster) -> None:
        """Close at once every session of `home` whose agent the new roster no longer lists."""
        listed = roster.agents()
        for (h, key), w in list(self._warm.items()):
            if h == home and key not in listed:
                w.close(TunEndReason.REVOKED.value)
            elif h == home:
                w.grant = listed[key]

    # -- calls ------------------------------------------------------------------------------

    async def call(self, home: str, agent_key: bytes, read: Read, body: Any = None) -> Reply:
        """Ask `home`'s box one read as agent `agent_key` (32 bytes); returns its `Reply`.

        The caller owns the deadline (a cancel scope); a cancelled call frees its place.

        Raises:
            Refusal: admission, the queue, the box, or the session ending refused it.
        """
        if self._draining:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        if self._queued.get(home, 0) >= self._config.queue_per_home:
            retry_ms = math.ceil(
                1000 * max(self.pacer.wait_s(home), 1 / self._config.pace_calls_per_s)
            )
            raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
        self._queued[home] = self._queued.get(home, 0) + 1
        queued = True
        arrived = trio.current_time()
        try:
            await self._admit(home, agent_key)
            await self.pacer.turn(home)
            for fresh in (False, True):
                w = await self._session(home, agent_key)
                async with w.lock:
                    if queued:
                        self._queued[home] -= 1
                        queued = False
                        if self._observer is not None:
                            self._observer.on_queue_wait(trio.current_time() - arrived)
                    if closed_idle(w) and not fresh:
                        continue  # it closed for idleness as we came: a new one (issue 11, D5)
                    w.idle.deadline = math.inf  # held from here, before any await: no idle close
                    try:
                        reply = await self._exchange(w, read, body)
                    finally:
                        w.idle.deadline = trio.current_time() + self._config.idle_close_s
                    break
            self.pacer.charge_bytes(home, reply.size)
            return reply
        finally:
            if queued:
                self._queued[home] -= 1
                self._notify()

    async def _session(self, home: str, agent_key: bytes) -> Warm:
        key = (home, agent_key)
        w = self._warm.get(key)
        if w is None or w.end_reason is not None or closed_idle(w):
            w = self._start(home, agent_key)
        else:
            self._warm.move_to_end(key)
        await w.ready.wait()
        if w.failure is not None:
            raise w.failure
        return w

    async def _admit(self, home: str, agent_key: bytes) -> AgentGrant:
        roster = await self._door.roster(home)
        if roster is None:
            raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "home"})
        decision = admit(roster, agent_key, self._wall_ms())
        if isinstance(decision, Refusal):
            w = self._warm.get((home, agent_key))
            if w is not None:
                w.close(
                    TunEndReason.EXPIRED.value
                    if decision.code is Code.E_GRANT_EXPIRED
                    else TunEndReason.REVOKED.value
                )
            raise decision
        return decision.grant

    def _start(self, home: str, agent_key: bytes) -> Warm:
        if self._nursery is None:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "restarting"})
        at_home = sum(1 for h, k in self._warm if h == home and k != agent_key)
        top = self._config.sessions_per_home
        if at_home >= top:
            raise Refusal(
                Code.E_CAP_EXCEEDED, {"cap": Cap.SESSIONS.value, "max": top, "asked": at_home + 1}
            )
        if (home, agent_key) not in self._warm:  # replacing a dying session needs no room
            self._evict_for_room()
        w = Warm(home, agent_key)
        self._warm[(home, agent_key)] = w
        self._nursery.start_soon(self._run_session, w)
        return w

    def _evict_for_room(self) -> None:
        while len(self._warm) >= self._config.warm_sessions:
            for w in self._warm.values():  # least recently used first
                if not w.lock.locked() and w.end_reason is None:
                    w.close(TunEndReason.IDLE.value)
                    self._warm.pop((w.home, w.agent_key), None)
                    break
            else:
                return

    async def _exchange(self, w: Warm, read: Read, body: Any) -> Reply:
        if w.end_reason is not None or w.agent is None or w.tun is None:
            raise refusal_for_end(w.end_reason or "closed")
        if w.grant is not None and self._wall_ms() >= w.grant.expires_at_ms:
            w.close(TunEndReason.EXPIRED.value)
            raise Refusal(Code.E_GRANT_EXPIRED, {"expiresAtMs": w.grant.expires_at_ms})
        async with self._limiter:
            self._in_flight += 1
            self._notify()
            try:
                try:
                    rid, message = w.agent.request(read.value, body)
                except LocalProtocolError:  # the box ended the session while we waited
                    raise refusal_for_end(w.end_reason or TunEndReason.CLOSED.value) from None
                waiter = Waiter(rid)
                w.waiter = waiter
                try:
                    sent = await w.tun.send(message)
                except TunEnded as exc:
                    raise refusal_for_end(exc.reason) from None
                if not sent:  # the door dropped it past the home's limit: say so now
                    retry_ms = math.ceil(1000 / self._config.door_msgs_per_s)
                    raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": retry_ms}, retry_ms)
                await waiter.done.wait()
            finally:
                self._in_flight -= 1
                self._notify()
                if w.waiter is not None and not w.waiter.done.is_set():
                    w.agent.abandon()
                w.waiter = None
        if waiter.refusal is not None:
            raise waiter.refusal
        assert waiter.reply is not None
        return waiter.reply

    # -- the session task -------------------------------------------------------------------

    async def _run_session(self, w: Warm) -> None:
        try:
            with w.scope:
                started = trio.current_time()
                try:
                    await self._open(w)
                    self._observed_open("ok", started)
                except Refusal as exc:
                    self._observed_open(exc.code, started)
                    w.failure = exc
                    w.end_reason = w.end_reason or LocalEnd.REFUSED.value
                    return
                finally:
                    w.ready.set()
                w.idle.deadline = trio.current_time() + self._config.idle_close_s
                with w.idle:
                    assert w.tun is not None
                    while early := w.tun.queued():  # came between hello_ok and now, in order
                        for message in early:
                            await deliver(w, message)
                    w.tun.sink = functools.partial(deliver, w)  # no await since: in order
                    raise TunEnded(await w.tun.wait_ended())
                if w.idle.cancelled_caught:
                    w.end_reason = w.end_reason or TunEndReason.IDLE.value
        except TunEnded as exc:
            w.end_reason = w.end_reason or exc.reason
        except ProtocolError:
            w.end_reason = w.end_reason or LocalEnd.PROTOCOL_ERROR.value
        finally:
            reason = w.end_reason or TunEndReason.CLOSED.value
            w.end_reason = reason
            if w.failure is None and not w.ready.is_set():
                w.failure = refusal_for_end(reason)
            w.ready.set()
            if w.waiter is not None and not w.waiter.done.is_set():
                w.waiter.refusal = refusal_for_end(reason)
                w.waiter.done.set()
            if w.tun is not None:  # the box hears tun.end before we forget it (bounded)
                await w.tun.aclose(tun_end_reason(reason))
            if self._warm.get((w.home, w.agent_key)) is w:
                del self._warm[(w.home, w.agent_key)]
            self._drops[reason] = self._drops.get(reason, 0) + 1
            self._notify()
            log.info("session end home=%s reason=%s", w.home, reason)

    def _observed_open(self, outcome: str, started: float) -> None:
        if self._observer is not None:
            self._observer.on_open(outcome, trio.current_time() - started)

    async def _open(self, w: Warm) -> None:
        grant = await self._admit(w.home, w.agent_key)
        w.grant = grant
        roster = await self._door.roster(w.home)
        assert roster is not None and roster.noise is not None
        try:
            w.tun = await self._door.open_tun(w.home)
        except HomeOffline:
            raise Refusal(Code.E_UNAVAILABLE, {"subsystem": "door"}) from None
        handle: int | None = None
        with trio.move_on_after(self._config.handshake_s) as deadline:
            try:
                handle, m1 = await self._keys.begin(w.agent_key, roster.noise)
                if not await w.tun.send(m1):
                    raise Refusal(Code.E_RATE_LIMITED, {"retryAfterMs": 1000}, 1000)
                m2 = await w.tun.receive()
                keys = await self._keys.finish(handle, m2)
                handle = None
            except KeysError as exc:
                if exc.bad_message:  # the box's message 2 did not complete the handshake
                    raise Refusal(Code.E_UNAVAILABLE, {"reason": "handshake_failed"}) from None
                what = "agent_key" if exc.unknown_key else "keys"
                raise Refusal(Code.E_UNAVAILABLE, {"subsystem": what}) from None
            except TunEnded as exc:
                raise refusal_for_end(exc.reason) from None
            finally:
                if handle is not None:
                    with (
                        trio.CancelScope(shield=True),
                        trio.move_on_after(1),
                        contextlib.suppress(KeysError),
                    ):
                        await self._keys.abort(handle)
            w.agent = AgentSession(keys)
            await w.tun.send(w.agent.notify(Msg.HELLO, HELLO_BODY))
            await self._wait_hello_ok(w)
        if deadline.cancelled_caught:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "no_answer"})

    async def _wait_hello_ok(self, w: Warm) -> None:
        assert w.agent is not None and w.tun is not None
        while True:
            for ev in w.agent.receive(await w.tun.receive()):
                if isinstance(ev, Push) and ev.t == Msg.HELLO_OK and isinstance(ev.body, dict):
                    check_clock(ev.body, self._wall_ms(), self._config.clock_skew_max_ms)
                    w.hello_ok = ev.body
                    return
                if isinstance(ev, Push) and ev.t == Msg.ERROR and isinstance(ev.body, dict):
                    args = ev.body.get("args")
                    raise Refusal(
                        peer_code(ev.body.get("code")), args if isinstance(args, dict) else {}
                    )
                if isinstance(ev, Terminated):
                    raise refusal_for_end(peer_reason(ev.reason))
