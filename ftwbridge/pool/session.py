"""One pooled agent session and its states, in one table (docs/architecture.md, "A
pooled session's states"; modelled on h11's and
httpcore's connection states).

    OPENING --opened--> READY --take--> BUSY --release--> READY
       |                  |               |
       +------close-------+-----close-----+--> CLOSING --end--> ENDED

BUSY means the box has, or is about to get, this session's one request (PROTOCOL.md part B:
one request in flight per session). A call owns a BUSY session from `take` until its answer;
a call that gives up leaves the session BUSY with no owner until the box's answer arrives (and
is dropped) or the session is closed for not answering (`call_deadline_s`), so the next call is
never sent behind work the box has not finished. Waiting calls park in FIFO order; a release
hands the session straight to the first of them.

The session holds no task and no cancel scope once open: the uplink's reader hands it the
box's messages (`deliver`), and the pool's one deadline heap closes it when idle or unanswered.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import trio

from ftwbridge.door import LocalEnd, Tun, TunEnded
from ftwbridge.proto.control import CmdAck
from ftwbridge.proto.errors import LocalProtocolError, ProtocolError
from ftwbridge.proto.names import Code, TunEndReason
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import peer_reason
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import Acked, AgentSession, Failed, Push, Reply, Terminated


def session_clock_ms() -> int:
    """The clock a session's box uptime is noted on (`AgentSession.receive`'s `now_ms`) and
    commands are timed by: trio's, in whole ms (only differences of it mean anything)."""
    return int(trio.current_time() * 1000)


class State(enum.Enum):
    """Where a pooled session is (see the module's diagram)."""

    OPENING = "opening"
    READY = "ready"
    BUSY = "busy"
    CLOSING = "closing"
    ENDED = "ended"


class Move(enum.Enum):
    """What happens to a pooled session."""

    OPENED = "opened"
    TAKE = "take"
    RELEASE = "release"
    CLOSE = "close"
    END = "end"


TRANSITIONS: dict[tuple[State, Move], State] = {
    (State.OPENING, Move.OPENED): State.READY,
    (State.READY, Move.TAKE): State.BUSY,
    (State.BUSY, Move.RELEASE): State.READY,
    (State.OPENING, Move.CLOSE): State.CLOSING,
    (State.READY, Move.CLOSE): State.CLOSING,
    (State.BUSY, Move.CLOSE): State.CLOSING,
    (State.CLOSING, Move.END): State.ENDED,
}
"""Every allowed move; any other raises `LocalProtocolError` (a bug in the pool, not input)."""

REPLACEABLE = frozenset({TunEndReason.IDLE.value, LocalEnd.NO_ANSWER.value})
"""End reasons the bridge chose without any caller asking: a call that meets one takes a new
session instead of a refusal."""


@dataclass(slots=True, eq=False)
class Waiter:
    """The call that owns a BUSY session, waiting for the answer to request `rid`: `reply` or
    `refusal` is set, then `done`."""

    rid: int
    done: trio.Event = field(default_factory=trio.Event)
    reply: Reply | None = None
    refusal: Refusal | None = None
    ack: CmdAck | None = None
    """A command's `cmd.ack`, when it came (the command goes on until `cmd.result`)."""


class Owner(Protocol):
    """What a session tells the pool that holds it."""

    def session_closed(self, s: PooledSession) -> None:
        """`s` just moved to CLOSING: forget it and end its tunnel."""

    def session_released(self, s: PooledSession) -> None:
        """`s` just became READY with nobody waiting: start its idle clock."""

    def box_done(self, s: PooledSession, answered: bool) -> None:
        """The box finished (`answered`) or will never finish `s`'s request: free its slot."""


def refusal_for_end(reason: str) -> Refusal:
    """The refusal a waiting call gets when its session ends with `reason`."""
    if reason == TunEndReason.REVOKED:
        return Refusal(Code.E_GRANT_REVOKED)
    if reason == TunEndReason.EXPIRED:
        return Refusal(Code.E_GRANT_EXPIRED)
    return Refusal(Code.E_UNAVAILABLE, {"reason": reason})


class PooledSession:
    """One agent's Noise session at one home, as the pool holds it.

    Args:
        owner: the pool (told of closes, releases and finished box work).
        home: the home's id.
        agent_key: the agent's 32-byte static public key.

    The state moves only through `_move` and `TRANSITIONS`. Times are trio's clock (seconds).
    """

    __slots__ = (
        "_lot",
        "_owner",
        "agent",
        "agent_key",
        "at_box",
        "check_at",
        "end_reason",
        "failure",
        "grant",
        "holder",
        "home",
        "idle_at",
        "opening",
        "push_sink",
        "sent_at",
        "state",
        "tun",
        "waiter",
    )

    def __init__(self, owner: Owner, home: str, agent_key: bytes) -> None:
        self._owner = owner
        self.home = home
        self.agent_key = agent_key
        self.state = State.OPENING
        self.grant: AgentGrant | None = None
        self.agent: AgentSession | None = None
        self.tun: Tun | None = None
        self.end_reason: str | None = None
        self.failure: Refusal | None = None
        """Why opening failed (the refusal every call waiting for it gets)."""
        self.opening: trio.CancelScope | None = None
        """The opening task's scope while OPENING (a close cancels it)."""
        self.holder: trio.lowlevel.Task | None = None
        """The call that owns the session while BUSY; None once it gave up."""
        self.waiter: Waiter | None = None
        self.at_box = False
        """A request was sent and its answer has not come: it holds a calls-in-flight slot."""
        self.sent_at = 0.0
        self.idle_at = 0.0
        self.check_at = float("inf")
        """When the pool's deadline heap looks at this session next (inf: not in the heap)."""
        self._lot: trio.lowlevel.ParkingLot | None = None
        self.push_sink: Callable[[Push], None] | None = None
        """Where messages that answer no call go (a live feed, `pool/feed.py`), if anywhere."""

    # -- the table ----------------------------------------------------------------------------

    def _move(self, move: Move) -> None:
        new = TRANSITIONS.get((self.state, move))
        if new is None:
            raise LocalProtocolError(f"pooled session: {move.value} while {self.state.value}")
        self.state = new

    @property
    def is_available(self) -> bool:
        """READY: a call may take it now."""
        return self.state is State.READY

    @property
    def is_closed(self) -> bool:
        """CLOSING or ENDED."""
        return self.state is State.CLOSING or self.state is State.ENDED

    @property
    def is_abandoned(self) -> bool:
        """BUSY with a request at the box whose caller gave up."""
        return self.state is State.BUSY and self.holder is None and self.at_box

    def has_expired(self, now: float) -> bool:
        """READY and idle past its deadline (`now` in trio seconds)."""
        return self.state is State.READY and now >= self.idle_at

    @property
    def waiting(self) -> int:
        """Calls parked for this session."""
        return 0 if self._lot is None else len(self._lot)

    # -- moves --------------------------------------------------------------------------------

    def opened(self) -> None:
        """The handshake and `hello_ok` are done: READY, or BUSY for the first waiting call."""
        self.opening = None
        self._move(Move.OPENED)
        self._hand_over()

    async def acquire(self) -> None:
        """Wait until the calling task owns this session (BUSY, `holder` is it) or the session
        is closed (then `is_closed`; the caller reads `failure` / `end_reason`). FIFO among
        waiters; a caller cancelled while waiting leaves no trace (as `trio.Lock`)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.state is State.READY:
            self._take(trio.lowlevel.current_task())
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        if self.is_closed:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        if self._lot is None:
            self._lot = trio.lowlevel.ParkingLot()
        await self._lot.park()  # woken as the new holder, or by the close

    def _take(self, task: trio.lowlevel.Task) -> None:
        self._move(Move.TAKE)
        self.holder = task

    def _hand_over(self) -> None:
        """READY: hand the session to the first parked call, or start its idle clock."""
        if self._lot:
            (task,) = self._lot.unpark(count=1)
            self._take(task)
        else:
            self._owner.session_released(self)

    def release(self) -> None:
        """The holder is done (its answer came, or nothing was sent): READY or handed on."""
        self.holder = None
        self.waiter = None
        if self.state is State.BUSY:
            self._move(Move.RELEASE)
            self._hand_over()

    def give_up(self) -> None:
        """The holder stopped waiting while its request is at the box: the session stays BUSY,
        with no holder, until that answer arrives or the pool closes it (`call_deadline_s`
        after it was sent)."""
        self.holder = None
        self.waiter = None
        if self.agent is not None:
            self.agent.abandon()

    def close(self, reason: str) -> None:
        """Move to CLOSING for `reason` (the first reason stays): the waiting call is refused,
        parked calls wake, the opening is cancelled, and the pool ends the tunnel."""
        if self.is_closed:
            return
        self.end_reason = reason
        self._move(Move.CLOSE)
        if self.opening is not None:
            self.opening.cancel()
        waiter = self.waiter
        if waiter is not None and not waiter.done.is_set():
            waiter.refusal = refusal_for_end(reason)
            waiter.done.set()
        self.holder = None
        if self.at_box:
            self.at_box = False
            self._owner.box_done(self, answered=False)
        if self._lot:
            self._lot.unpark_all()
        self._owner.session_closed(self)

    def ended(self) -> None:
        """The tunnel is closed and the box told: ENDED."""
        self._move(Move.END)

    # -- the box's messages ---------------------------------------------------------------------

    async def deliver(self, message: bytes) -> None:
        """One Noise message from the box, in the uplink reader's task (`Tun.sink`): an answer
        goes to its call directly, a late answer to a call that gave up frees the session; a
        message that fails the session (authentication, replay) or `session.terminate` ends it.
        """
        if self.agent is None or self.tun is None or self.is_closed:
            return
        try:
            events = self.agent.receive(message, now_ms=session_clock_ms())
        except ProtocolError:
            self.close(LocalEnd.PROTOCOL_ERROR.value)
            return
        for out in self.agent.data_to_send():
            try:
                await self.tun.send(out)
            except TunEnded:
                return
        for ev in events:
            if isinstance(ev, Terminated):
                self.close(peer_reason(ev.reason))
                return
            if isinstance(ev, Push):
                if self.push_sink is not None:
                    self.push_sink(ev)
                continue
            if self.state is not State.BUSY:
                continue
            if isinstance(ev, Acked):
                if self.waiter is not None and self.waiter.rid == ev.id:
                    self.waiter.ack = ev.ack
                continue
            self._answered(ev)

    def _answered(self, ev: Reply | Failed) -> None:
        if self.at_box:
            self.at_box = False
            self._owner.box_done(self, answered=True)
        waiter = self.waiter
        if waiter is None:  # its caller gave up: the answer is dropped, the session free
            if self.holder is None:
                self.release()
            return
        if waiter.rid != ev.id:
            return
        if isinstance(ev, Reply):
            waiter.reply = ev
        else:
            waiter.refusal = ev.refusal
        waiter.done.set()
