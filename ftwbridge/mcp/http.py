"""The HTTP side of `/mcp`, independent of the framework: the request and response the shell
hands over, and the gates a request passes before its JSON-RPC is read (PROTOCOL.md part D).

`gate_headers` checks, in order, the HTTP method (405, `Allow: POST`), `Content-Type` (415),
`Accept` (406) and the declared body size (413); `read_body` reads the body within the
caller's size and time bounds (413, 408, or a client that left). Each refusal is a JSON-RPC
error body and names its audit outcome in `Seen`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_types import jsonrpc

from . import inbound
from .audit import Seen
from .results import compact_json

RATE_LIMITED_JSONRPC = -32029
"""JSON-RPC code of a 429 (implementation-defined server error range, JSON-RPC 2.0 section 5.1)."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One HTTP request: method, headers (lower-case name -> every value), declared length,
    and `read_body()`, which raises `BodyTooLarge` or `BodyTooSlow`."""

    method: str
    headers: dict[str, list[str]]
    read_body: Callable[[], Awaitable[bytes]]
    content_length: int | None = None
    remote: str = ""
    """The client's address (behind trusted proxies, the client's), or the forwarding
    instance's id; `forward` is given the agent instead (the entry's coarse guard)."""
    mesh_epoch: int | None = None
    """Set on a request another instance forwarded (`ftwbridge.mesh`): the epoch at which
    the sender believed this instance holds the token's home."""
    token_digest: bytes | None = None
    """On a forwarded request: the SHA-256 of the bearer token the sender verified, sent in
    its place (the token itself never crosses the hop)."""
    budget_s: float | None = None
    """Set on a forwarded request: the time its sender left for it, seconds from its
    arrival (`deadline.BUDGET`); it can only shorten `call_deadline_s`."""
    work_ends: float = math.inf
    """When the call's work is cut, trio time (`deadline.work_ends`, from the call's start):
    set by `handle` on the request it forwards, whose hop gets what is left of it."""
    client_gone: Callable[[], bool] = lambda: False
    """Whether the client has closed its connection already (asked once the answer is
    ready: an answer nobody will read is audited `delivered=no`, docs/operations.md "Logs")."""


class BodyTooLarge(Exception):
    """The body passed the size bound while being read (413)."""


class BodyTooSlow(Exception):
    """The body did not arrive within the time bound (408)."""


class BodyGone(Exception):
    """The client left before its whole body arrived (audited as `cancelled`; no answer)."""


Write = Callable[[bytes], Awaitable[None]]
"""Writes one piece of a streamed response body (the HTTP shell's)."""


@dataclass(slots=True)
class HttpResponse:
    """Status, headers and body bytes to send; or, with `stream`, a body of unknown length
    that `stream(write)` writes piece by piece until it returns (`subscriptions/listen`).
    The shell cancels `stream` when the client goes away."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    outcome: str | None = None
    """The audit outcome of a response a guard made (`audit.OUTCOMES`), not sent."""
    stream: Callable[[Write], Awaitable[None]] | None = None


def json_response(status: int, value: Any, headers: dict[str, str] | None = None) -> HttpResponse:
    """`value` as a JSON body (UTF-8, compact) with `status` and any extra `headers`."""
    # A lone surrogate a client sent (and we echo, e.g. in an error) becomes a \\uXXXX escape.
    body = compact_json(value).encode("utf-8", "backslashreplace")
    return HttpResponse(status, {"content-type": "application/json", **(headers or {})}, body)


LATE_WORDS = "The bridge could not finish this request in time; try again in a few seconds."
"""What a request still under way `call_deadline_s` after its start reads (a 503)."""


def late() -> HttpResponse:
    """The 503 in words of a request still under way at its deadline (`Retry-After: 2`)."""
    rej = inbound.Rejection(503, jsonrpc.INTERNAL_ERROR, LATE_WORDS)
    return json_response(503, rej.body(), {"retry-after": "2", "cache-control": "no-store"})


def refuse_body(status: int, message: str) -> HttpResponse:
    """413 or 408 before the body is read whole: the connection closes, so a client still
    sending stops and reads the answer instead of filling the socket."""
    rej = inbound.Rejection(status, jsonrpc.INVALID_REQUEST, message)
    return json_response(status, rej.body(), {"connection": "close"})


def accepts_json(values: list[str]) -> bool:
    """Whether the `Accept` header's `values` allow a JSON answer (none at all do)."""
    if not values:
        return True
    for part in ",".join(values).split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("application/json", "application/*", "*/*", ""):
            return True
    return False


def _refuse(status: int, message: str) -> HttpResponse:
    return json_response(status, inbound.Rejection(status, jsonrpc.INVALID_REQUEST, message).body())


def gate_headers(req: HttpRequest, max_body: int, seen: Seen) -> HttpResponse | None:
    """The refusal of a request whose method, media types or declared size `/mcp` does not
    take (405, 415, 406, 413, in that order), with its outcome in `seen`; None lets it on."""
    if req.method != "POST":
        seen.outcome = "method_not_allowed"
        return HttpResponse(405, {"allow": "POST"})
    ctype = (req.headers.get("content-type") or [""])[0].split(";")[0].strip().lower()
    if ctype != "application/json":
        seen.outcome = "bad_media_type"
        return _refuse(415, "Content-Type must be application/json")
    if not accepts_json(req.headers.get("accept", [])):
        seen.outcome = "not_acceptable"
        return _refuse(406, "Accept must allow application/json")
    if req.content_length is not None and req.content_length > max_body:
        seen.outcome = "body_too_large"
        return refuse_body(413, "Request body too large")
    return None


async def read_body(req: HttpRequest, seen: Seen) -> bytes | HttpResponse:
    """The body, or the refusal of one past the size bound (413), too slow (408), or left
    unfinished by its client (400, audited `cancelled`), with its outcome in `seen`."""
    try:
        return await req.read_body()
    except BodyTooLarge:
        seen.outcome = "body_too_large"
        return refuse_body(413, "Request body too large")
    except BodyTooSlow:
        seen.outcome = "body_too_slow"
        return refuse_body(408, "Request body not received in time")
    except BodyGone:
        seen.outcome = "cancelled"
        return refuse_body(400, "Request body incomplete")
