"""Requests at the boxes: one request's send and wait on a held session (`exchange`), at
most `calls_in_flight` at once across the process, and the running estimate of each home's
answer time that the queue's retry hints use (`pool/admission.py`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from ftwbridge.config import Config
from ftwbridge.door import TunEnded
from ftwbridge.proto.control import CmdAck
from ftwbridge.proto.errors import LocalProtocolError
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.session import AgentSession, Reply

from .homes import HomeShare
from .session import PooledSession, Waiter, refusal_for_end

ANSWER_EWMA = 0.3
"""Weight of the newest answer time in a home's running estimate (for retry hints)."""


class AtBoxes:
    """The requests now at the boxes (`count`, those whose caller gave up included).

    Args:
        config: `calls_in_flight`, `call_deadline_s`, `door_msgs_per_s`.
        homes: the pool's shares by home (their `answer_s` is kept here).
        notify: called whenever `count` changes (the pool's change event).
        schedule: the pool's deadline heap: a request given up is looked at again by then.
    """

    def __init__(
        self,
        config: Config,
        homes: dict[str, HomeShare],
        notify: Callable[[], None],
        schedule: Callable[[PooledSession, float], None],
    ) -> None:
        self._limiter = trio.CapacityLimiter(config.calls_in_flight)
        self._call_deadline_s = config.call_deadline_s
        self._door_msgs_per_s = config.door_msgs_per_s
        self._homes = homes
        self._notify = notify
        self._schedule = schedule
        self.count = 0

    async def exchange(
        self,
        s: PooledSession,
        start: Callable[[AgentSession], tuple[int, bytes]],
        *,
        acks: list[CmdAck] | None = None,
    ) -> Reply:
        """Send one request on `s` (held by this task, from `Pool.hold`) and wait for its answer:
        `start(agent)` makes it (`AgentSession.request` or `.command`) and returns (id,
        message). The session stays held for a next request; `Pool.hold` releases it. A command's
        `cmd.ack`, if one came, is appended to `acks`, also when the wait is cancelled.

        Raises:
            Refusal: the box refused, the door dropped the message, or the session ended.
        """
        await self._limiter.acquire_on_behalf_of(s)
        self.count += 1
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
                retry_ms = math.ceil(1000 / self._door_msgs_per_s)
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
                    self._schedule(s, s.sent_at + self._call_deadline_s)
                else:
                    s.waiter = None
        if waiter.refusal is not None:
            raise waiter.refusal
        assert waiter.reply is not None
        return waiter.reply

    def box_done(self, s: PooledSession, answered: bool) -> None:
        """The box finished `s`'s request (`answered`) or never will: its slot is free."""
        s.at_box = False
        self._limiter.release_on_behalf_of(s)
        self.count -= 1
        if answered:
            h = self._homes.get(s.home)
            if h is not None:
                took = trio.current_time() - s.sent_at
                h.answer_s += ANSWER_EWMA * (took - h.answer_s)
        self._notify()
