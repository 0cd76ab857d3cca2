"""What the door tells an operator about peers it refuses: rate-limited warnings, and the
record of a home whose box sent an older roster than the bridge holds (docs/operations.md, "A box that lost its roster")."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import trio

from ftwbridge.proto.clean import clean

log = logging.getLogger("ftwbridge.door")
REFUSAL_LOG_S = 60.0
"""The door logs one warning per home and kind of refusal (an uplink refused, a stale roster)
in this many seconds at most; the next line says how many it held back."""
REFUSAL_LOG_KEYS = 4096
"""At most this many (kind, home) pairs are remembered for that; past it they start afresh."""


@dataclass(frozen=True, slots=True)
class RosterBehind:
    """A home whose box sent a roster older than the one the bridge holds (a box that lost
    its roster: reset, or restored from an old backup). `box_seq` and `held_seq` are the two
    rosters' `seq`; `box_agents` the agent keys the box's own roster lists (it admits those)."""

    box_seq: int
    held_seq: int
    box_agents: frozenset[bytes]


class RefusalLog:
    """Warnings the door logs about a peer's refusals, at most one per (kind, home) in
    `REFUSAL_LOG_S` (trio clock seconds), with the count held back since the last line."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def warn(self, kind: str, home: str, message: str, *args: object) -> None:
        now = trio.current_time()
        key = (kind, home)
        last = self._last.get(key)
        if last is not None and now - last[0] < REFUSAL_LOG_S:
            self._last[key] = (last[0], last[1] + 1)
            return
        if len(self._last) >= REFUSAL_LOG_KEYS:
            self._last.clear()
        self._last[key] = (now, 0)
        held_back = last[1] if last is not None else 0
        more = f" ({held_back} more like it since the last line)" if held_back else ""
        log.warning(message + "%s", *args, more)


def peer_text(text: str) -> str:
    """A peer's text for one log line: cleaned, one line, at most 64 characters."""
    return clean(text).replace("\n", " ").replace("\t", " ")[:64] or "-"
