"""How a read tool is answered: by the bridge itself, by reads that follow earlier answers
(`energy_tools.py`), or by the box reads its spec lists, the `live.get` among them answered
from the agent's fresh live feed when there is one (PROTOCOL.md part F). Every way ends by the
call's `work_ends` and yields a cleaned result; an answer that cannot be read is `E_BAD_BODY`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from ftwbridge.proto.clean import to_json
from ftwbridge.proto.names import Answer, Cap, Code, Read
from ftwbridge.proto.refusal import Refusal
from ftwbridge.proto.registry import CAPS
from ftwbridge.proto.session import Reply
from ftwbridge.store import TokenRecord

from .control import ControlPort
from .energy_tools import AnswerCache, FlowContext, cached
from .results import conforms, ok_result
from .tools import ToolContext, ToolSpec


class LivePort(Protocol):
    """The pool's live feeds (`pool/feed.py`, PROTOCOL.md part F) as `/mcp` uses them."""

    def live_view(self, home: str, agent_key: bytes) -> dict[str, Any] | None:
        """A fresh `live` answer from a running feed, or None (then the box is read)."""

    def lease(self, home: str, agent_key: bytes, seconds: float) -> None:
        """Keep the (home, agent) feed referenced for `seconds` (starting it if none runs)."""


def _unreadable(name: str, exc: Exception) -> Refusal:
    logging.getLogger("ftwbridge.mcp").warning(
        "unreadable answer for %s: %s", name, type(exc).__name__
    )
    return Refusal(Code.E_BAD_BODY)


class ToolRunner:
    """Runs read tools for one bridge.

    Args:
        homes: the port to the pool and rosters (reads and grants).
        wall_ms: the bridge's wall clock, ms since the epoch.
        clock_skew_ms: how far a box's clock may run from ours (ms), for flows' windows.
        live: the pool's live feeds, if any.
    """

    def __init__(
        self,
        *,
        homes: ControlPort,
        wall_ms: Callable[[], int],
        clock_skew_ms: int,
        live: LivePort | None,
    ) -> None:
        self._homes = homes
        self._wall_ms = wall_ms
        self._skew_ms = clock_skew_ms
        self._live = live
        self._answers = AnswerCache()

    async def run(
        self, spec: ToolSpec, args: Any, token: TokenRecord, ends: float
    ) -> dict[str, Any]:
        """The tool's result for `token`'s agent, ended by `ends` (trio time).

        Raises:
            Refusal: the box refused, `E_UNAVAILABLE {reason: timeout}` past `ends`, or
                `E_BAD_BODY` for an answer that does not fit the tool's output schema.
        """
        now_ms = self._wall_ms()
        if spec.run is not None:  # the bridge answers it itself
            grant = await self._homes.grant(token.home, token.agent_key)
            return ok_result(to_json(spec.run(token, grant)))
        if spec.flow is not None:  # reads that follow the answers (energy_tools.py)
            return await self._flow(spec, args, token, now_ms, ends)
        replies: list[Reply] = []
        with trio.move_on_at(ends) as scope:
            for read, body in spec.box_requests(args, now_ms):
                fed = self._fed(token, read)
                if fed is not None:
                    replies.append(fed)
                    continue
                replies.append(await self._homes.call(token.home, token.agent_key, read, body))
        if scope.cancelled_caught:
            raise Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})
        try:
            value = spec.shape(args, replies, ToolContext(now_ms))
            if not conforms(value, spec.output):
                raise ValueError("the answer does not fit the tool's output schema")
            return ok_result(value)
        except Exception as exc:  # a box answer we cannot read: E_BAD_BODY, in words
            raise _unreadable(spec.name, exc) from exc

    async def _flow(
        self, spec: ToolSpec, args: Any, token: TokenRecord, now_ms: int, ends: float
    ) -> dict[str, Any]:
        """A tool whose reads depend on earlier answers, ended by `ends` (trio time, the call's
        `work_ends`, counted from its start); its
        `energy.get` answers are reused per home while they cannot change (`AnswerCache`)."""
        assert spec.flow is not None
        grant = await self._homes.grant(token.home, token.agent_key)
        days = grant.cap(Cap.HISTORY_DAYS) if grant else CAPS[Cap.HISTORY_DAYS].default
        hold = grant.cap(Cap.HOLD_S) if grant else CAPS[Cap.HOLD_S].default

        async def read(r: Read, body: Any) -> Reply:
            return await self._homes.call(token.home, token.agent_key, r, body)

        call = cached(self._answers, token.home, token.agent_key, read, now_ms)
        with trio.move_on_at(ends):
            try:
                value = await spec.flow(call, args, FlowContext(now_ms, days, hold, self._skew_ms))
            except (ValueError, KeyError, TypeError) as exc:  # an answer we cannot read
                raise _unreadable(spec.name, exc) from exc
            return ok_result(to_json(value))
        raise Refusal(Code.E_UNAVAILABLE, {"reason": "timeout"})

    def _fed(self, token: TokenRecord, read: Read) -> Reply | None:
        """A `live.get` answered from the agent's fresh live feed (PROTOCOL.md part F: the
        feed rebuilds part B's `live` answer from `snap` and deltas), or None: read the box."""
        if read is not Read.LIVE_GET or self._live is None:
            return None
        view = self._live.live_view(token.home, token.agent_key)
        return None if view is None else Reply(0, Answer.LIVE.value, view)
