"""The stub box's clock for goal requests (PROTOCOL.md part E): a request nobody decides
expires after 24 h, and its agent hears `agent.decided {expired}` then, not when the box next
hears a message.

`GoalTimer.run(next_due, expire)` sleeps until `next_due()` (the earliest waiting request's
`expiresAtMs`, the box's wall clock in ms since the epoch, or None when none waits) or until
`wake()`, then awaits `expire()`. It owns no nursery: the stub's uplink runs it in its own
(`StubHome.run_session`), since pushes need an uplink.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio


class GoalTimer:
    """Sleeps until the next goal request runs out.

    Args:
        wall_ms: the box's wall clock, ms since the epoch.
    """

    def __init__(self, wall_ms: Callable[[], int]) -> None:
        self._wall_ms = wall_ms
        self._changed = trio.Event()

    def wake(self) -> None:
        """Look again: a request was queued, or the wall clock moved."""
        self._changed.set()
        self._changed = trio.Event()

    async def run(
        self, next_due: Callable[[], int | None], expire: Callable[[], Awaitable[None]]
    ) -> NoReturn:
        """Await `expire()` each time the earliest waiting request's time (`next_due()`, ms
        since the epoch) has come by the wall clock; until cancelled. A request decided
        meanwhile is simply no longer due."""
        while True:
            changed = self._changed
            due = next_due()
            if due is None:
                await changed.wait()
                continue
            with trio.move_on_after(max(0, due - self._wall_ms()) / 1000) as timer:
                await changed.wait()
            if timer.cancelled_caught:
                await expire()
