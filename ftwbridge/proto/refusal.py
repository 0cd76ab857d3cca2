"""The one refusal value of ftwbridge: what the roster, the session, the pool, the door and the
MCP layer say when a call cannot be answered (a registry code with its details)."""

from __future__ import annotations

from typing import Any

from .names import Code


class Refusal(Exception):
    """A call that cannot be answered, as the contract names it.

    Attributes:
        code: a registry code (registry.yaml / agents.yaml `errors`), or a newer box's code of
            the same shape (`registry.peer_code` has cleaned any code a peer sent).
        details: the error's args (a dict; the box's `error.args`, or ours, e.g.
            `{"reason": "timeout"}`).
        retry_after_ms: when asking again may help, in ms, if anyone knows.

    Raised by the pool and returned by `roster.admit` and the session's `Failed` events; the
    MCP layer turns it into words once (`mcp/words.py`).
    """

    def __init__(
        self,
        code: Code | str,
        details: dict[str, Any] | None = None,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(str(code))
        self.code = str(code)
        self.details: dict[str, Any] = details or {}
        self.retry_after_ms = retry_after_ms

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Refusal) and (self.code, self.details, self.retry_after_ms) == (
            other.code,
            other.details,
            other.retry_after_ms,
        )

    def __hash__(self) -> int:
        return hash((self.code, self.retry_after_ms))

    def __repr__(self) -> str:
        return f"Refusal({self.code!r}, {self.details!r}, {self.retry_after_ms!r})"
