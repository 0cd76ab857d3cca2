"""hypercorn's keep-alive timer, one task per connection (`IdleTimer`, used by
`edge.GuardedTCPServer`)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio


class IdleTimer:
    """hypercorn's keep-alive timer (the `restart`/`stop` of its `SingleTask`), one task per
    connection instead of one per idle spell.

    hypercorn starts a new task, under a lock, each time a connection turns idle and cancels it
    when the next request starts. That cost about a ninth of a bridged call's instructions
    (docs/performance.md, "Instructions per call"). Here one task per connection, spawned at the
    first `restart`, waits in a cancel scope whose deadline `restart` sets (now +
    `keep_alive_s`) and `stop` clears. It runs `close` when the deadline passes while idle, or
    as soon as the server is stopping (`terminated`) while idle, as hypercorn's own timer does
    (`TCPServer._idle_timeout`). `end()` retires it when the connection ends.
    """

    __slots__ = (
        "_close",
        "_deadline",
        "_ended",
        "_keep_alive_s",
        "_scope",
        "_started",
        "_stopping",
    )

    def __init__(
        self, keep_alive_s: float, stopping: Any, close: Callable[[], Awaitable[None]]
    ) -> None:
        self._keep_alive_s = keep_alive_s
        self._stopping = stopping  # hypercorn's `context.terminated` (`wait()`, `is_set()`)
        self._close = close
        self._deadline = math.inf
        self._scope: trio.CancelScope | None = None
        self._started = False
        self._ended = False

    async def restart(self, task_group: Any, action: Any = None) -> None:
        """The connection is idle: close it after `keep_alive_s` seconds, or at once when the
        server is stopping. (`action`, hypercorn's own timer, is not used.)"""
        now = trio.current_time()
        self._set(now if self._stopping.is_set() else now + self._keep_alive_s)
        if not self._started:
            self._started = True
            task_group.spawn(self._watch)

    async def stop(self) -> None:
        """A request is under way: no idle close until the next `restart`."""
        self._set(math.inf)

    def end(self) -> None:
        """The connection has ended: the timer's task returns."""
        self._ended = True
        if self._scope is not None:
            self._scope.cancel()

    def _set(self, deadline: float) -> None:
        self._deadline = deadline
        if self._scope is not None:
            self._scope.deadline = deadline

    async def _watch(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._deadline) as scope:
                self._scope = scope
                if self._ended:
                    return
                if self._stopping.is_set():
                    await trio.sleep_forever()
                else:
                    await self._stopping.wait()
            self._scope = None
            if self._ended:
                return
            if self._deadline <= trio.current_time() or (
                self._deadline < math.inf and self._stopping.is_set()
            ):
                break
        with trio.CancelScope(shield=True):
            await self._close()
