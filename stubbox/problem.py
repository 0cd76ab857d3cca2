"""A box's refusal of a read, and the upstream `error` body it becomes (PROTOCOL.md part A)."""

from __future__ import annotations

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


def error_body(
    code: Code, args: dict[str, Any], retry_after_ms: int | None = None
) -> dict[str, Any]:
    """An upstream `error` body `{code, retryable, retryAfterMs?, args?}`."""
    body: dict[str, Any] = {"code": code.value, "retryable": CODES[code].retryable}
    if retry_after_ms is not None:
        body["retryAfterMs"] = retry_after_ms
    if args:
        body["args"] = args
    return body
