"""The pool's bookkeeping types: its statistics, its observer, one home's share, and the
port its command steps and live feeds hold sessions through."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ftwbridge.proto.control import CmdAck
from ftwbridge.proto.roster import AgentGrant
from ftwbridge.proto.session import AgentSession, Reply

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


class SessionHolder(Protocol):
    """What the pool's command steps (`command.py`) and live feeds (`feed.py`) use of the
    `Pool` that runs them: holding an agent's session, one request on it, one read, and a
    task in the pool's nursery."""

    def hold(
        self, home: str, agent_key: bytes, *, command: bool = False
    ) -> AbstractAsyncContextManager[tuple[PooledSession, AgentGrant]]:
        """`Pool.hold`."""
        ...

    async def exchange(
        self,
        s: PooledSession,
        start: Callable[[AgentSession], tuple[int, bytes]],
        *,
        acks: list[CmdAck] | None = None,
    ) -> Reply:
        """`Pool.exchange`."""
        ...

    async def call(self, home: str, agent_key: bytes, read: str, body: Any = None) -> Reply:
        """`Pool.call`."""
        ...

    def spawn(self, fn: Callable[..., Any], *args: Any) -> bool:
        """`Pool.spawn`."""
        ...
