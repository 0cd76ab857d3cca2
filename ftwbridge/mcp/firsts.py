"""The first answer of each command, so that a retried or replayed command says it is that
answer and when it was observed (docs/control.md, "Retries").

A command goes out again under the same `cmdId` when a client retries its call (the retry
rule, `mcp/cmdids.py`) or replays an accepted confirmation. The box acts once per `cmdId` and
answers it again with its first answer, whose read-back (`observed`) is what the charger did
then, not now. `FirstAnswers` keeps, per (home, agent key, `cmdId`), when the first attempt
was sent and, once it ended, its outcome and when the bridge observed it (wall clock, ms since
the epoch). No I/O, no clock: callers pass the times. At most `MAX_PER_AGENT` commands per
assistant and `MAX_AGENTS` assistants, the least recent forgotten first: bounded per assistant
first, so one assistant's many commands never make the bridge forget another's first answer
(and then present that answer's old read-back as if it were new).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

MAX_PER_AGENT: Final = 64
"""Commands whose first answer is remembered per assistant (home and agent key)."""
MAX_AGENTS: Final = 10_000
"""Assistants whose commands are remembered at once."""

Key = tuple[str, bytes, str]
"""(home, agent key, cmdId)."""


@dataclass(slots=True)
class First:
    """A command's first attempt: `sent_ms` when it was sent; `outcome` (the pool's
    `CommandOutcome`) and `observed_ms` once it ended, else None (in flight, or it timed out:
    the box may have acted)."""

    sent_ms: int
    outcome: Any = None
    observed_ms: int | None = None


class FirstAnswers:
    """The first attempts of recent commands."""

    def __init__(self, per_agent: int = MAX_PER_AGENT, agents: int = MAX_AGENTS) -> None:
        self._per = per_agent
        self._agents = agents
        self._books: OrderedDict[tuple[str, bytes], OrderedDict[str, First]] = OrderedDict()

    def _held(self, key: Key) -> First | None:
        book = self._books.get((key[0], key[1]))
        return None if book is None else book.get(key[2])

    def begin(self, key: Key, *, now_ms: int) -> First | None:
        """An attempt of `key` starts at `now_ms`: the earlier first attempt, or None when this
        is the first (then it is noted as sent)."""
        agent = (key[0], key[1])
        book = self._books.get(agent)
        if book is None:
            book = self._books[agent] = OrderedDict()
        self._books.move_to_end(agent)
        held = book.get(key[2])
        if held is not None:
            book.move_to_end(key[2])
            return held
        book[key[2]] = First(now_ms)
        while len(book) > self._per:
            book.popitem(last=False)
        while len(self._books) > self._agents:
            self._books.popitem(last=False)
        return None

    def done(self, key: Key, outcome: Any, *, observed_ms: int | None) -> None:
        """The attempt of `key` ended with `outcome`, observed at `observed_ms` (None when the
        read-back may be an earlier attempt's, of unknown time). A first outcome is kept."""
        held = self._held(key)
        if held is not None and held.outcome is None:
            held.outcome, held.observed_ms = outcome, observed_ms

    def forget(self, key: Key) -> None:
        """`key` was refused before an answer came: a later attempt is a first again."""
        held = self._held(key)
        if held is not None and held.outcome is None:
            del self._books[(key[0], key[1])][key[2]]
