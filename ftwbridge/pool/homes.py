"""The pool's bookkeeping types: its statistics, its observer, and one home's share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .session import PooledSession


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


class HomeShare:
    """One home's share of the pool: its open sessions by agent key, its queue, and how long
    its box has taken to answer (seconds, a running estimate)."""

    __slots__ = ("answer_s", "commands", "queued", "sessions")

    def __init__(self) -> None:
        self.sessions: dict[bytes, PooledSession] = {}
        self.queued = 0
        """Reads waiting for their turn or their session."""
        self.commands = 0
        """Commands waiting, counted apart so reads never fill their places."""
        self.answer_s = 0.0

    def count(self, command: bool, delta: int) -> None:
        """One more (`delta` 1) or one fewer (-1) call waiting, in its own count."""
        if command:
            self.commands += delta
        else:
            self.queued += delta
