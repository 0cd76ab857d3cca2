"""The first answer of each command, so that a retried or replayed command says it is that
answer and when it was observed (docs/control.md, "Retries").

A command goes out again under the same `cmdId` when a client retries its call (the retry
rule, `mcp/cmdids.py`) or replays an accepted confirmation. The box acts once per `cmdId` and
answers it again with its first answer, whose read-back (`observed`) is what the charger did
then, not now. `FirstAnswers` keeps, per (home, agent key, `cmdId`), when the first attempt
was sent and, once it ended, its outcome and when the bridge observed it (wall clock, ms since
the epoch). No I/O, no clock: callers pass the times. At most `MAX_FIRSTS` commands, the
least recent forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

MAX_FIRSTS: Final = 10_000
"""Commands whose first answer is remembered at most."""

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

    def __init__(self, max_entries: int = MAX_FIRSTS) -> None:
        self._max = max_entries
        self._firsts: OrderedDict[Key, First] = OrderedDict()

    def begin(self, key: Key, *, now_ms: int) -> First | None:
        """An attempt of `key` starts at `now_ms`: the earlier first attempt, or None when this
        is the first (then it is noted as sent)."""
        held = self._firsts.get(key)
        if held is not None:
            self._firsts.move_to_end(key)
            return held
        self._firsts[key] = First(now_ms)
        while len(self._firsts) > self._max:
            self._firsts.popitem(last=False)
        return None

    def done(self, key: Key, outcome: Any, *, observed_ms: int | None) -> None:
        """The attempt of `key` ended with `outcome`, observed at `observed_ms` (None when the
        read-back may be an earlier attempt's, of unknown time). A first outcome is kept."""
        held = self._firsts.get(key)
        if held is not None and held.outcome is None:
            held.outcome, held.observed_ms = outcome, observed_ms

    def forget(self, key: Key) -> None:
        """`key` was refused before an answer came: a later attempt is a first again."""
        held = self._firsts.get(key)
        if held is not None and held.outcome is None:
            del self._firsts[key]
