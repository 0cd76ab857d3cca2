"""How the pool ends sessions: a session moved to CLOSING is forgotten at once and its tunnel
ended by a short task (the box hears `tun.end {reason}`, bounded and shielded), so nothing is
left behind; `Closings` counts those still to end, which `Pool.drain` waits for."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import trio

from ftwbridge.door import tun_end_reason
from ftwbridge.proto.names import TunEndReason

from .session import PooledSession

FINAL_CLOSE_S = 2.0
"""How long the pool's stop gives the tunnels still open to hear `tun.end` (seconds)."""


class Closings:
    """Sessions closed but whose tunnel is still to end.

    Args:
        notify: called whenever `count` changes (the pool's change event).
    """

    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._orphans: list[PooledSession] = []
        """Closed sessions whose tunnels are still to be ended (by `_finish_orphans`)."""
        self.count = 0
        """Sessions CLOSING: their box is still to hear `tun.end`."""

    def closed(self, s: PooledSession, nursery: trio.Nursery | None) -> None:
        """`s` moved to CLOSING: its tunnel is ended in a short task of `nursery` (an opening
        session's own task does that instead, as does `end_all` when there is no nursery)."""
        self.count += 1
        self._notify()
        if s.opening is None:
            self._orphans.append(s)
            if nursery is not None:
                with contextlib.suppress(RuntimeError):  # closed to new arrivals: `end_all`
                    nursery.start_soon(self._finish_orphans)

    async def end_all(self) -> None:
        """End the tunnels still to end, within `FINAL_CLOSE_S`, shielded (the pool stops)."""
        with trio.CancelScope(shield=True, deadline=trio.current_time() + FINAL_CLOSE_S):
            async with trio.open_nursery() as closing:
                for s in self._orphans:
                    closing.start_soon(self.finish, s)
                self._orphans.clear()

    async def _finish_orphans(self) -> None:
        while self._orphans:
            s = self._orphans.pop()
            await self.finish(s)

    async def finish(self, s: PooledSession) -> None:
        """End `s`'s tunnel (the box hears `tun.end`, bounded and shielded) and count it gone."""
        reason = s.end_reason or TunEndReason.CLOSED.value
        if s.tun is not None:
            await s.tun.aclose(tun_end_reason(reason))
        s.ended()
        self.count -= 1
        self._notify()
