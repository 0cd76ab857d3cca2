"""The retry rule of PROTOCOL.md part E: which `cmdId` a call's command goes under.

A client that retries a call (same agent, JSON-RPC id, tool and arguments) within
`RETRY_WINDOW_S` gets the `cmdId` of the first try, so the box, which answers a `cmdId` it has
seen in the last 24 h with the same answer, acts once. A later call, or any other id, tool or
arguments, is a new command, and so is a call that repeats one the agent has since followed
with another (`CommandIds`). The table lives on the instance that serves the call.
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
"""Agents whose latest call is remembered at most (memory stays bounded)."""


def call_digest(tool: str, arguments: Any) -> str:
    """SHA-256 (hex) of a tool's name and its arguments as canonical JSON (sorted keys, no
    spaces), so the same call digests the same however its client ordered the members."""
    text = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


class CommandIds:
    """The retry rule's table: for each agent (home, agent key), its latest call (JSON-RPC id,
    call digest) with the `cmdId` it went under and when.

    Only the latest call is kept: a retry re-sends the call an agent made last, and JSON-RPC
    ids are unique only within one client's connection, so once the agent has sent another
    command, an older id is no longer a retry. (A client that reconnects restarts its ids:
    its `ev_stop` with id 3 must not be answered with the stop another connection made with
    id 3 before a new charge.)

    Times are the caller's monotonic seconds (trio's clock); `new_id()` makes a new `cmdId`
    (UUIDv7 text, `Pool.new_cmd_id`). No I/O, no clock of its own; at most `MAX_ENTRIES`
    agents, the least recent forgotten first.
    """

    def __init__(self, new_id: Callable[[], str]) -> None:
        self._new_id = new_id
        self._latest: OrderedDict[tuple[str, bytes], tuple[str, str, str, float]] = OrderedDict()

    def cmd_id(
        self,
        *,
        home: str,
        agent_key: bytes,
        rid: str | int,
        digest: str,
        now_s: float,
    ) -> str:
        """The `cmdId` for this call: the first try's when it repeats the agent's latest call
        within `RETRY_WINDOW_S` of it, else a new one (then the agent's latest call)."""
        agent = (home, agent_key)
        call = json.dumps(rid)
        held = self._latest.get(agent)
        if held is not None and held[:2] == (call, digest) and now_s - held[3] < RETRY_WINDOW_S:
            return held[2]
        made = self._new_id()
        self.note(home=home, agent_key=agent_key, rid=rid, digest=digest, cmd_id=made, now_s=now_s)
        return made

    def note(
        self,
        *,
        home: str,
        agent_key: bytes,
        rid: str | int,
        digest: str,
        cmd_id: str,
        now_s: float,
    ) -> None:
        """This call (JSON-RPC id `rid`, `digest`) is the agent's latest, sent as `cmd_id`
        (made here, or carried by a confirmation's `requestState`): an earlier call is no
        longer a retry, and a retry of this one within `RETRY_WINDOW_S` reuses `cmd_id`."""
        agent = (home, agent_key)
        self._latest[agent] = (json.dumps(rid), digest, cmd_id, now_s)
        self._latest.move_to_end(agent)
        while len(self._latest) > MAX_ENTRIES:
            self._latest.popitem(last=False)

    def replace(self, old: str, new: str) -> None:
        """The call that used `old` sent `new` instead (a retry after `E_CONFLICT`, which the
        box answers anew only under a new id): its retries use `new`."""
        for agent, (call, digest, cmd, at) in self._latest.items():
            if cmd == old:
                self._latest[agent] = (call, digest, new, at)

    def __len__(self) -> int:
        return len(self._latest)
