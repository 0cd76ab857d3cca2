"""A box's refusal of a request, the upstream `error` body it becomes (PROTOCOL.md part A), and
the rolling windows its rate limits count in."""

from __future__ import annotations

from collections import deque
from typing import Any

from ftwbridge.proto.names import Code
from ftwbridge.proto.registry import CODES


class Problem(Exception):
    """A read refused with a registry code and args (becomes an `error` body)."""

    def __init__(self, code: Code, retry_after_ms: int | None = None, **args: Any) -> None:
        super().__init__(code)
        self.code = code
        self.args_ = args
        self.retry_after_ms = retry_after_ms


ECHO_CHARS = 64
"""Most characters of a peer's text (a type, a field name) an `error` repeats back."""


def error_body(
    code: Code, args: dict[str, Any], retry_after_ms: int | None = None
) -> dict[str, Any]:
    """An upstream `error` body `{code, retryable, retryAfterMs?, args?}`; text args are cut
    to `ECHO_CHARS`, so a hostile type or field name is not sent back whole."""
    body: dict[str, Any] = {"code": code.value, "retryable": CODES[code].retryable}
    if retry_after_ms is not None:
        body["retryAfterMs"] = retry_after_ms
    if args:
        body["args"] = {k: v[:ECHO_CHARS] if isinstance(v, str) else v for k, v in args.items()}
    return body


def take_slot(recent: deque[int], now_ms: int, *, window_ms: int, most: int, cap: str) -> None:
    """Count one event at `now_ms` in a rolling window of `window_ms` (ms) holding at most
    `most` (the grant's cap named `cap`, agents.yaml `caps`); `recent` holds the window's
    event times, oldest first, and is updated.

    Raises:
        Problem: `E_RATE_LIMITED {retryAfterMs}` when the window is full (nothing counted);
            `E_CAP_EXCEEDED {cap, max: 0, asked: 1}` when the cap is 0, the owner allowing
            none (waiting would not help; PROTOCOL.md part B "Refusals added by agents").
    """
    if most <= 0:
        raise Problem(Code.E_CAP_EXCEEDED, cap=cap, max=0, asked=1)
    while recent and recent[0] <= now_ms - window_ms:
        recent.popleft()
    if len(recent) >= most:
        wait = recent[0] + window_ms - now_ms
        raise Problem(Code.E_RATE_LIMITED, wait, retryAfterMs=wait)
    recent.append(now_ms)
