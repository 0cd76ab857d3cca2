"""The pool's one timer: a heap of when to look at each session next (the pool's
idle and no-answer closes, `pool/eviction.py`).

Each session has at most one live entry, at `PooledSession.check_at`; a later deadline never
pushes (the look at the earlier one finds the session's real deadline and pushes that), and a
sooner one makes the older entry stale (skipped when popped). So the heap holds about one entry
per session, whatever the call rate, and no session needs a task or a cancel scope of its own.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

import trio

from .session import PooledSession


class DeadlineHeap:
    """Looks at sessions when their time comes (trio's clock, seconds).

    Args:
        due: called with (session, now) when a session's look is due; it may `schedule` again.
    """

    def __init__(self, due: Callable[[PooledSession, float], None]) -> None:
        self._due = due
        self._heap: list[tuple[float, int, PooledSession]] = []
        self._seq = itertools.count()
        self._timer: trio.CancelScope | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, s: PooledSession, when: float) -> None:
        """Look at `s` at `when` unless a look comes sooner already."""
        if when >= s.check_at:
            return
        s.check_at = when
        heapq.heappush(self._heap, (when, next(self._seq), s))
        if self._timer is not None and when < self._timer.deadline:
            self._timer.deadline = when

    async def run(self) -> None:
        """Wait for each due look and make it, until cancelled."""
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as timer:
                self._timer = timer
                await trio.sleep_forever()
            self._timer = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                when, _, s = heapq.heappop(heap)
                if s.check_at != when:
                    continue  # a sooner look replaced this one
                s.check_at = math.inf
                if not s.is_closed:
                    self._due(s, now)
