"""The retry rule of PROTOCOL.md part E: which `cmdId` a call's command goes under.

A client that retries a call (same agent, JSON-RPC id, tool and arguments) within
`RETRY_WINDOW_S` gets the `cmdId` of the first try, so the box, which answers a `cmdId` it has
seen in the last 24 h with the same answer, acts once. A later call, or any other id, tool or
arguments, is a new command. The table lives on the instance that serves the call.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

RETRY_WINDOW_S: Final = 60.0
"""How long a call's `cmdId` is reused for its retries, seconds (PROTOCOL.md part E)."""
MAX_ENTRIES: Final = 10_000
"""Calls remembered at most; the oldest is forgotten first (memory stays bounded)."""


def call_digest(tool: str, arguments: Any) -> str:
    """SHA-256 (hex) of a tool's name and its arguments as canonical JSON (sorted keys, no
    spaces), so the same call digests the same however its client ordered the members."""
    text = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


class CommandIds:
    """The retry rule's table: (home, agent key, JSON-RPC id, call digest) -> (cmdId, when).

    Times are the caller's monotonic seconds (trio's clock); `new_id()` makes a new `cmdId`
    (UUIDv7 text, `Pool.new_cmd_id`). No I/O, no clock of its own.
    """

    def __init__(self, new_id: Callable[[], str]) -> None:
        self._new_id = new_id
        self._seen: OrderedDict[tuple[str, bytes, str, str], tuple[str, float]] = OrderedDict()

    def cmd_id(
        self,
        *,
        home: str,
        agent_key: bytes,
        rid: str | int,
        digest: str,
        now_s: float,
    ) -> str:
        """The `cmdId` for this call: the first try's when this is its retry within
        `RETRY_WINDOW_S`, else a new one (remembered for later retries)."""
        self._forget(now_s)
        key = (home, agent_key, json.dumps(rid), digest)
        held = self._seen.get(key)
        if held is not None:
            return held[0]
        made = self._new_id()
        self._seen[key] = (made, now_s)
        while len(self._seen) > MAX_ENTRIES:
            self._seen.popitem(last=False)
        return made

    def replace(self, old: str, new: str) -> None:
        """The call that used `old` sent `new` instead (a retry after `E_CONFLICT`, which the
        box answers anew only under a new id): its retries use `new`."""
        for key, (cmd, at) in self._seen.items():
            if cmd == old:
                self._seen[key] = (new, at)

    def _forget(self, now_s: float) -> None:
        while self._seen:
            _key, (_cmd, at) = next(iter(self._seen.items()))
            if now_s - at < RETRY_WINDOW_S:
                return
            self._seen.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)
