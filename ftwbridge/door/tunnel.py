"""Tunnels and uplinks at the door: one `Tun` per session, one `Uplink` per connected box."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import trio

from ftwbridge.proto.door import tun, tun_end
from ftwbridge.proto.names import TunEndReason
from ftwbridge.proto.pacing import TokenBucket

log = logging.getLogger("ftwbridge.door")
ACLOSE_S = 1.0
"""The most `Tun.aclose` waits to tell the box `tun.end` (seconds)."""
TUN_QUEUE = 16
"""Messages a tunnel buffers from the box before the uplink's reader waits (back-pressure)."""


class WebSocketLike(Protocol):
    """The part of a server WebSocket the door uses (`door.wsock.LeanSocket`).

    `send` writes one message whole or not at all, and the door relies on it: sends are
    serialised in the order they are called (a send behind another waits in FIFO order, and
    one cancelled while it waits sent nothing), and the write itself is shielded from the
    caller's cancellation and bounded on its own (`LeanSocket.write`: `wsock.SEND_S`)."""

    async def receive(self) -> str | bytes: ...
    async def send(self, data: bytes) -> None: ...
    async def close(self, code: int, reason: str = "") -> None: ...


WS_GONE = (
    trio.BrokenResourceError,  # the peer is gone
    trio.ClosedResourceError,  # `wsock.BoxGone`: the WebSocket has ended or was closed
)
"""What a send or close on a WebSocket that is already going away can raise."""


async def close_ws(ws: WebSocketLike, code: int, reason: str) -> None:
    """Close `ws` with `code` if it can still be closed; a socket already gone is left as is
    (bounded to 1 s, so a peer that reads nothing cannot hold the caller)."""
    with trio.move_on_after(1):
        try:
            await ws.close(code, reason)
        except WS_GONE as exc:
            log.debug("close %d not sent: %s", code, type(exc).__name__)


class LocalEnd(StrEnum):
    """Why a session ended, when no `tun.end` reason of the contract says it: these name the
    cause in metrics, logs and the caller's refusal, and never travel to a box."""

    REFUSED = "refused"
    """Opening the session was refused (keys part, handshake, clock, the box's own error)."""
    PROTOCOL_ERROR = "protocol_error"
    """The box sent what the session layer refuses (authentication failure, replay)."""
    UPLINK_LOST = "uplink_lost"
    """The box's uplink ended under the tunnel."""
    NO_ANSWER = "no_answer"
    """The box did not answer a request within the call deadline: the session is replaced."""


def tun_end_reason(cause: str) -> TunEndReason:
    """The `tun.end` reason (agents.yaml `tun_end_reasons`) for a session that ended by `cause`:
    a contract reason stays itself; a local cause or a box's `session.terminate` reason that
    `tun.end` lacks (`box_shutdown`, `epoch_changed`) becomes `closed`. The one place that
    chooses what a box hears."""
    try:
        return TunEndReason(cause)
    except ValueError:
        return TunEndReason.CLOSED


class HomeOffline(Exception):
    """The home has no uplink at the door now."""


class TunEnded(Exception):
    """The tunnel ended: `reason` is a `tun.end` reason, or `uplink_lost`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class Limits:
    """One direction of one home's door limits: a message bucket and a byte bucket."""

    msgs: TokenBucket
    nbytes: TokenBucket

    def allow(self, now: float, size: int) -> bool:
        """Take one message of `size` bytes at `now` (s) if both buckets allow it."""
        msgs, nbytes = self.msgs, self.nbytes
        if not (msgs.ready(now) and nbytes.ready(now, size)):
            return False
        msgs.debit(1)  # both just said yes at `now`: no refill again
        nbytes.debit(size)
        return True


class Tun:
    """One tunnel: Noise messages to and from one box session, by `sid` on an uplink."""

    def __init__(self, uplink: Uplink, sid: int) -> None:
        self.sid = sid
        self.home = uplink.home
        self._uplink = uplink
        self._inbox: deque[bytes] | None = deque()
        """Messages from the box until `attach`, `TUN_QUEUE` at most; None after (an open
        session needs no queue)."""
        self._lot = trio.lowlevel.ParkingLot()
        """Where `receive` waits for the next message (the opening task, before `attach`)."""
        self.end_reason: str | None = None
        self.sink: Callable[[bytes], Awaitable[None]] | None = None
        """Once set, the uplink's reader hands each Noise message from the box straight to it
        (no queue, no task switch); before, messages wait in the tunnel's queue."""
        self.on_end: Callable[[str], None] | None = None
        """Told the reason, once, when the tunnel ends (by the box, the uplink, or `aclose`)."""

    async def send(self, d: bytes) -> bool:
        """Send one Noise message to the box; returns False when the door dropped it (past the
        home's limit; counted in `DoorStats.dropped_to_box`). A send cancelled sent nothing
        (`Uplink.send_raw`).

        Raises:
            TunEnded: the tunnel or its uplink has ended.
        """
        if self.end_reason is not None:
            raise TunEnded(self.end_reason)
        return await self._uplink.send_tun(self.sid, d)

    async def receive(self) -> bytes:
        """The box's next Noise message on this tunnel (what came before the end is still
        given). A checkpoint only when cancelled or when it waits.

        Raises:
            TunEnded: the box ended the tunnel, or the uplink was lost or taken over.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._inbox:
                return self._inbox.popleft()
            if self._inbox is None or self.end_reason is not None:
                raise TunEnded(self.end_reason or TunEndReason.CLOSED.value)
            await self._lot.park()  # woken by a message, the end, or `attach`

    def queued(self) -> list[bytes]:
        """Take every message waiting in the queue (those that came before `sink` was set)."""
        if not self._inbox:
            return []
        out = list(self._inbox)
        self._inbox.clear()
        return out

    def attach(self, sink: Callable[[bytes], Awaitable[None]]) -> None:
        """From now on the uplink's reader hands each message to `sink`; the queue goes (the
        caller has taken what it held with `queued`, with no await since)."""
        self.sink = sink
        self._inbox = None
        self._lot.unpark_all()

    def _deliver(self, d: bytes) -> bool:
        """Queue one message from the box; False when the queue is full (`TUN_QUEUE`: the
        door counts it dropped). One that comes after the end, or after `attach` without a
        sink, goes nowhere."""
        inbox = self._inbox
        if inbox is None or self.end_reason is not None:
            return True
        if len(inbox) >= TUN_QUEUE:
            return False
        inbox.append(d)
        self._lot.unpark()
        return True

    def _end(self, reason: str) -> None:
        if self.end_reason is not None:
            return
        self.end_reason = reason
        self._lot.unpark_all()
        if self.on_end is not None:
            self.on_end(reason)

    async def aclose(self, reason: TunEndReason) -> None:
        """End the tunnel; the box hears `tun.end {sid, reason}` if the uplink is up.

        Shielded from the caller's cancellation and bounded by `ACLOSE_S` of its own, so a
        send that blocks (a box that reads nothing) cannot hold the caller's cleanup.
        """
        if self.end_reason is not None:
            self._uplink.tuns.pop(self.sid, None)
            return
        self._end(reason.value)
        self._uplink.tuns.pop(self.sid, None)
        with trio.CancelScope(shield=True, deadline=trio.current_time() + ACLOSE_S):
            await self._uplink.send_raw(tun_end(self.sid, reason))


class Uplink:
    """One authenticated box connection: its tunnels by sid and its serialized sends.

    Args:
        home: the home the box authenticated as.
        ws: its WebSocket.
        limits: the home's door limits toward the box (they outlive one uplink).
        on_dropped: told of each `tun` message dropped past those limits.
    """

    def __init__(
        self, home: str, ws: WebSocketLike, *, limits: Limits, on_dropped: Callable[[], None]
    ) -> None:
        self.home = home
        self._limits = limits
        self._on_dropped = on_dropped
        self.ws = ws
        self.tuns: dict[int, Tun] = {}
        self._next_sid = 1
        self.closed = False

    def new_sid(self) -> int:
        """A sid unused on this uplink."""
        sid = self._next_sid
        self._next_sid += 1
        return sid

    async def send_raw(self, data: bytes) -> None:
        """Send one door message; a dead socket is left to the reader to notice.

        A caller already cancelled sends nothing, and neither does one cancelled while it
        waits behind another send; once its write starts the message goes out whole, in the
        order the sends were called. The socket keeps those rules itself (`WebSocketLike`:
        its own FIFO lock, taken without a scheduler turn when free, and a shielded write
        bounded by `wsock.SEND_S`), so no lock or shield is taken here.

        One scheduler turn is taken before the write, on purpose: it cuts a call's step from
        its request's bytes to its `tun` send between the seal and the write, where the lock's
        turn used to, which keeps the run loop's batches as short as they were (without it
        their CPU p99 rose by about a tenth: `bench/batches.py`; docs/performance.md,
        "Scheduler turns per call").
        """
        if self.closed:
            return
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller sends nothing
        await trio.lowlevel.cancel_shielded_checkpoint()  # the turn: see above
        try:
            await self.ws.send(data)
        except WS_GONE as exc:  # the socket is gone: the reader notices and cleans up
            log.debug("uplink %s send failed: %s", self.home, type(exc).__name__)

    async def send_tun(self, sid: int, d: bytes) -> bool:
        """Send one Noise message on tunnel `sid`; False when the home's limit dropped it."""
        if self.closed:
            raise TunEnded(LocalEnd.UPLINK_LOST.value)
        data = tun(sid, d)
        if not self._limits.allow(trio.current_time(), len(data)):
            self._on_dropped()
            return False
        await self.send_raw(data)
        return True

    def end_all(self, reason: str) -> None:
        """The uplink is gone: every tunnel ends with `reason`."""
        self.closed = True
        for t in list(self.tuns.values()):
            t._end(reason)
        self.tuns.clear()
